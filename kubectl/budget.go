package kubectl

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// budget is one instance type's underlay-IP capacity: what a node of that
// type offers, for a node autoscaler that simulates instance types rather
// than Nodes.
type budget struct {
	InstanceType string `json:"instanceType"`
	IPs          int64  `json:"ips"`
	// Nodes are the nodes the budget was read from (none when given on
	// the command line).
	Nodes []string `json:"nodes,omitempty"`
}

// budgets groups nodes by their instance type (the well-known label) with
// the capacity rule's value, default def. A node without the label, with
// an invalid capacity, or whose capacity differs from another node of its
// type is an error that names it: a node group has one budget.
func budgets(nodes []*v1.Node, def int64) ([]budget, error) {
	byType := map[string]*budget{}
	for _, n := range nodes {
		it := n.Labels[v1.LabelInstanceTypeStable]
		if it == "" {
			return nil, fmt.Errorf("node %s has no %s label: give the budget with --instance-type and --capacity", n.Name, v1.LabelInstanceTypeStable)
		}
		c := underlay.NodeCapacity(n.Annotations, n.Labels, def)
		if c.Invalid != "" {
			return nil, fmt.Errorf("node %s (%s): its underlay-IP capacity is invalid (%s): fix it, or give the budget with --instance-type and --capacity", n.Name, it, c.Invalid)
		}
		b, ok := byType[it]
		if !ok {
			byType[it] = &budget{InstanceType: it, IPs: c.IPs, Nodes: []string{n.Name}}
			continue
		}
		if b.IPs != c.IPs {
			return nil, fmt.Errorf("instance type %s: node %s has %d underlay IPs, node %s has %d: one node group, one budget (select one group with -l, or give it with --capacity)", it, b.Nodes[0], b.IPs, n.Name, c.IPs)
		}
		b.Nodes = append(b.Nodes, n.Name)
	}
	out := make([]budget, 0, len(byType))
	for _, b := range byType {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].InstanceType < out[j].InstanceType })
	return out, nil
}

// nodeOverlay is Karpenter's NodeOverlay (karpenter.sh/v1alpha1, feature
// gate NodeOverlay) that adds b's IPs as capscale.io/underlay-ip to the
// capacity of every instance type b names
// (pkg/apis/v1alpha1/nodeoverlay.go of sigs.k8s.io/karpenter v1.14.1:
// spec.requirements, spec.capacity).
func nodeOverlay(b budget) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.sh/v1alpha1",
		"kind":       "NodeOverlay",
		"metadata":   map[string]any{"name": overlayName(b.InstanceType)},
		"spec": map[string]any{
			"requirements": []any{map[string]any{
				"key": v1.LabelInstanceTypeStable, "operator": string(v1.NodeSelectorOpIn), "values": []any{b.InstanceType},
			}},
			"capacity": map[string]any{names.UnderlayIPResource: strconv.FormatInt(b.IPs, 10)},
		},
	}}
}

// overlayName is a DNS subdomain: instance types may hold dots and
// capitals (m5.large, Standard_D4s_v5), object names may not.
func overlayName(instanceType string) string {
	n := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, instanceType)
	return "capscale-underlay-ip-" + strings.Trim(n, "-")
}

// caTagKey is Cluster Autoscaler's node-template resource tag for the
// underlay IPs (its AWS provider reads Auto Scaling Group tags of this
// form to scale a group from zero: cloudprovider/aws/README.md, "Scaling a
// node group to 0"); its value is the budget.
const caTagKey = "k8s.io/cluster-autoscaler/node-template/resources/" + names.UnderlayIPResource
