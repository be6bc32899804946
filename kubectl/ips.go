package kubectl

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/capscale/capscale/internal/ipreport"
	"github.com/capscale/capscale/internal/underlay"
	"github.com/capscale/capscale/workload/capacity"
)

type ipsOptions struct {
	filter          ipreport.Filter
	selector        string
	output          string
	noHeaders       bool
	defaultCapacity int64
}

func newIPsCommand(s *session) *cobra.Command {
	o := ipsOptions{}
	cmd := &cobra.Command{
		Use:   "ips [NODE...]",
		Short: "Underlay IPs per node: capacity, used, free, waiting pods, and a cluster total",
		Long: `ips reads Nodes and Pods as you and applies the rule every scheduling mode
applies: ` + underlay.CapacityRuleText + `; a bound, unfinished pod holds
its request of capscale.io/underlay-ip. Unbound Pending pods hold nothing and
are counted as waiting (per node when preemption nominated them there).
It warns (on stderr, and under "uncounted" in -o json|yaml) about pods in
namespaces labelled capscale.io/underlay=true that are not hostNetwork and
ask for no underlay IP: they hold an IP nobody counts.
It needs list on nodes, pods and namespaces (ClusterRole capscale-kubectl:ips).`,
		Example: `  kubectl capscale ips
  kubectl capscale ips --min-free 2 --sort-by free
  kubectl capscale ips --full -o wide
  kubectl capscale ips node-1 node-2 -o yaml`,
		ValidArgsFunction: s.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.filter.Names = args
			if err := o.validate(); err != nil {
				return err
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			nodes, pods, err := readCluster(cmd.Context(), c, o.selector)
			if err != nil {
				return explain(err, "ips", false)
			}
			scope := ipreport.AllNodes
			if o.selector != "" {
				scope = ipreport.SelectedNodes
			}
			rep := ipreport.Build(nodes, pods, o.defaultCapacity, scope)
			marked, err := markedNamespaces(cmd.Context(), c)
			if err != nil {
				fmt.Fprintf(s.streams.ErrOut, "Warning: cannot tell which pods hold an underlay IP nobody counts: %v (ClusterRole capscale-kubectl:ips grants list on namespaces)\n", err)
			} else {
				rep = ipreport.WithUncounted(rep, pods, marked)
			}
			if rep, err = o.filter.Apply(rep); err != nil {
				return err
			}
			if err := printReport(s.streams.Out, rep, o.output, o.noHeaders); err != nil {
				return err
			}
			warnUncounted(s.streams.ErrOut, rep.Uncounted)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.filter.Full, "full", false, "only nodes with no underlay IP free")
	f.Int64Var(&o.filter.MinFree, "min-free", 0, "only nodes with at least this many underlay IPs free")
	f.BoolVar(&o.filter.Invalid, "invalid", false, "only nodes whose capacity annotation or label is invalid")
	f.StringVar(&o.filter.SortBy, "sort-by", ipreport.SortName, "order of the nodes: "+strings.Join(ipreport.SortOrders, ", ")+" (numbers: most first)")
	f.StringVarP(&o.selector, "selector", "l", "", "only nodes matching this label selector")
	f.StringVarP(&o.output, "output", "o", "", "output format: "+strings.Join(reportFormats, ", ")+" (default: a table)")
	f.BoolVar(&o.noHeaders, "no-headers", false, "table output without the header line")
	f.Int64Var(&o.defaultCapacity, "default-capacity", capacity.DefaultUnderlayIPCapacity,
		underlay.DefaultCapacityText+": set it to the --default-capacity your capscale components run with")
	_ = cmd.RegisterFlagCompletionFunc("sort-by", cobra.FixedCompletions(ipreport.SortOrders, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(reportFormats, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o ipsOptions) validate() error {
	if err := o.filter.Validate(); err != nil {
		return err
	}
	if o.defaultCapacity < 0 || o.defaultCapacity > underlay.MaxCapacity {
		return fmt.Errorf("--default-capacity must be within 0..%d, got %d", underlay.MaxCapacity, o.defaultCapacity)
	}
	return checkFormat(o.output, reportFormats)
}
