package kubectl

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/capscale/capscale/internal/underlay"
	"github.com/capscale/capscale/workload/capacity"
)

// Output formats of `kubectl capscale autoscaler`.
var autoscalerFormats = []string{"yaml", "json", "tags"}

type autoscalerOptions struct {
	selector        string
	output          string
	instanceType    string
	capacity        int64
	defaultCapacity int64
}

func newAutoscalerCommand(s *session) *cobra.Command {
	o := autoscalerOptions{capacity: -1}
	cmd := &cobra.Command{
		Use:   "autoscaler [NODE...]",
		Short: "Karpenter's NodeOverlay and Cluster Autoscaler's node-template tag for each instance type's underlay IPs",
		Long: `autoscaler tells a node autoscaler what a new node of each instance type will
offer in underlay IPs, so that it launches nodes for pods Pending for IPs
(native mode: docs/growing-the-cluster.md). It reads the nodes
as you (all, those named, or those matching -l), groups them by their
node.kubernetes.io/instance-type label and takes each node's capacity by the
rule (annotation, capacity source, label, default); two nodes of one type
with different capacities, or an invalid one, are an error. With
--instance-type and --capacity it reads nothing.

-o yaml (the default) prints one Karpenter NodeOverlay per instance type
(karpenter.sh/v1alpha1; Karpenter's NodeOverlay feature gate), each after a
comment with Cluster Autoscaler's node-template tag; -o json the overlays as
a List; -o tags the tags alone, "INSTANCE-TYPE KEY=VALUE" a line.`,
		Example: `  kubectl capscale autoscaler -l karpenter.sh/nodepool=underlay | kubectl apply -f -
  kubectl capscale autoscaler --instance-type m5.large --capacity 9
  kubectl capscale autoscaler -l eks.amazonaws.com/nodegroup=web -o tags`,
		ValidArgsFunction: s.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(args); err != nil {
				return err
			}
			var bs []budget
			if o.instanceType != "" {
				bs = []budget{{InstanceType: o.instanceType, IPs: o.capacity}}
			} else {
				c, err := s.client()
				if err != nil {
					return err
				}
				nodes, err := listNodes(cmd.Context(), c, o.selector)
				if err != nil {
					return explain(err, "autoscaler", false)
				}
				if bs, err = budgets(named(nodes, args), o.defaultCapacity); err != nil {
					return err
				}
				if len(bs) == 0 {
					return fmt.Errorf("no node matched: name nodes, or give the budget with --instance-type and --capacity")
				}
			}
			return printBudgets(s.streams.Out, bs, o.output)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.selector, "selector", "l", "", "only nodes matching this label selector (one node group)")
	f.StringVarP(&o.output, "output", "o", "yaml", "output format: "+strings.Join(autoscalerFormats, ", "))
	f.StringVar(&o.instanceType, "instance-type", "", "the instance type, with --capacity: read no node")
	f.Int64Var(&o.capacity, "capacity", -1, "underlay IPs a node of --instance-type offers")
	f.Int64Var(&o.defaultCapacity, "default-capacity", capacity.DefaultUnderlayIPCapacity,
		"capacity of a node with neither annotation nor label: set it to the --default-capacity your capscale components run with")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(autoscalerFormats, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o autoscalerOptions) validate(args []string) error {
	if (o.instanceType == "") != (o.capacity < 0) {
		return fmt.Errorf("--instance-type and --capacity go together")
	}
	if o.instanceType != "" && (len(args) > 0 || o.selector != "") {
		return fmt.Errorf("--instance-type and --capacity read no node: drop the node names and -l")
	}
	if o.capacity > underlay.MaxCapacity {
		return fmt.Errorf("--capacity must be within 0..%d, got %d", underlay.MaxCapacity, o.capacity)
	}
	if o.defaultCapacity < 0 || o.defaultCapacity > underlay.MaxCapacity {
		return fmt.Errorf("--default-capacity must be within 0..%d, got %d", underlay.MaxCapacity, o.defaultCapacity)
	}
	return checkFormat(o.output, autoscalerFormats)
}

// named keeps the nodes whose names are in names, all without names.
func named(nodes []*v1.Node, names []string) []*v1.Node {
	if len(names) == 0 {
		return nodes
	}
	var out []*v1.Node
	for _, n := range nodes {
		if slices.Contains(names, n.Name) {
			out = append(out, n)
		}
	}
	return out
}

// printBudgets prints the NodeOverlays (yaml, json) or the tags.
func printBudgets(w io.Writer, bs []budget, format string) error {
	switch format {
	case "tags":
		for _, b := range bs {
			if _, err := fmt.Fprintf(w, "%s %s=%d\n", b.InstanceType, caTagKey, b.IPs); err != nil {
				return err
			}
		}
		return nil
	case "json":
		list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
		for _, b := range bs {
			list.Items = append(list.Items, *nodeOverlay(b))
		}
		return (&printers.JSONPrinter{}).PrintObj(list, w)
	}
	for i, b := range bs {
		sep := ""
		if i > 0 {
			sep = "---\n"
		}
		if _, err := fmt.Fprintf(w, "%s# Cluster Autoscaler's node-template tag for %s: %s=%d\n", sep, b.InstanceType, caTagKey, b.IPs); err != nil {
			return err
		}
		// A printer per object: the separator goes before the comment.
		if err := (&printers.YAMLPrinter{}).PrintObj(nodeOverlay(b), w); err != nil {
			return err
		}
	}
	return nil
}
