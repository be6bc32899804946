// Package ipreport is where the underlay IPs of a cluster are, as the
// cluster's own Nodes and Pods say, by the rule every scheduling mode
// applies (internal/underlay). kubectl-capscale prints it; it needs no
// capscale server, so it is right in every mode. It agrees with the
// extender's ledger (GET /capacity) whenever no bind is in flight: both
// count a bound, unfinished pod's need on its node, and neither counts an
// unbound pod; the ledger's short-lived reservations (a bind in flight) are
// the only difference, and they last milliseconds.
package ipreport

import (
	"sort"

	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// SourceNoNode is the Source of a node that pods are bound to but that has
// no Node object (deleted under its pods).
const SourceNoNode = "no-node"

// Pod is a pod that holds or waits for underlay IPs.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	IPs       int64  `json:"ips"`
	// Unasked: the pod asks for no IP and holds one because its node's
	// pool draws all (issue 49 §2).
	Unasked bool `json:"unasked,omitempty"`
}

// Node is one node's underlay IPs.
type Node struct {
	Name     string `json:"name"`
	Capacity int64  `json:"capacity"`
	// Source is where the capacity comes from: annotation, source (a
	// capacity source: the node's IPAM object), label, default
	// (underlay.Source*) or SourceNoNode.
	Source string `json:"source"`
	// Origin names, for Source "source", the capacity source and the
	// object it read: "<source> <resource>.<group>/<name>".
	Origin string `json:"origin,omitempty"`
	// Invalid says why the value at Source was rejected (capacity 0).
	Invalid string `json:"invalid,omitempty"`
	// DrawsAll: every pod of the node that is not hostNetwork holds an IP
	// of its pool, asked for or not.
	DrawsAll bool `json:"drawsAll,omitempty"`
	// Published is the capacity in the Node's status.allocatable, as
	// native mode publishes it; nil when not published.
	Published *int64 `json:"published,omitempty"`
	Used      int64  `json:"used"`
	// IPAMUsed is what the node's IPAM reports in use (the capacity
	// source's used, capscale.io/underlay-ip-source-used); nil when none.
	IPAMUsed *int64 `json:"ipamUsed,omitempty"`
	// Unlisted is the part of Used whose pods have no IP yet, which the
	// IPAM cannot list (underlay.Listed).
	Unlisted int64 `json:"unlisted,omitempty"`
	// Free is Capacity less the union of Used and IPAMUsed (the larger of
	// Used, and IPAMUsed plus Unlisted), never below 0 (underlay.Free).
	Free int64 `json:"free"`
	// Holders are the pods holding IPs on the node, sorted.
	Holders []Pod `json:"holders"`
	// Waiting are the Pending underlay pods nominated to this node
	// (status.nominatedNodeName: preemption made room for them here).
	Waiting []Pod `json:"waiting,omitempty"`
	// Uncounted is how many pods on the node hold an underlay IP nobody
	// counts (see UncountedPod).
	Uncounted int `json:"uncounted,omitempty"`

	// MaxCapacity is what the node's IPAM pool may grow to, as its
	// capacity source says (MaxCapacity); MaxCapacityInvalid says why the
	// source's value is not a count. Information only: Capacity is what
	// every mode schedules on.
	MaxCapacity        *int64 `json:"maxCapacity,omitempty"`
	MaxCapacityInvalid string `json:"maxCapacityInvalid,omitempty"`
}

// UncountedPod is a pod that holds an underlay IP nobody counts: bound and
// unfinished, in a namespace labelled capscale.io/underlay=true, not
// hostNetwork, and asking for no capscale.io/underlay-ip (created before
// the admission policy that adds the request, or while it was off).
type UncountedPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node"`
}

// Totals sums the nodes.
type Totals struct {
	Nodes    int   `json:"nodes"`
	Capacity int64 `json:"capacity"`
	Used     int64 `json:"used"`
	Free     int64 `json:"free"`
	// Full counts nodes with no IP free; Invalid nodes whose capacity is
	// invalid.
	Full    int `json:"full"`
	Invalid int `json:"invalid"`
	// Waiting counts every Pending underlay pod not yet bound, nominated
	// or not.
	Waiting int `json:"waiting"`
}

// Report is the cluster's underlay IPs.
type Report struct {
	// DefaultCapacity is the capacity of a node with neither annotation
	// nor label, as the caller said the components are configured.
	DefaultCapacity int64  `json:"defaultCapacity"`
	Nodes           []Node `json:"nodes"`
	Totals          Totals `json:"totals"`
	// Waiting lists the Pending underlay pods not yet bound.
	Waiting []Pod `json:"waiting"`
	// Uncounted lists the pods on the report's nodes that hold an
	// underlay IP nobody counts (WithUncounted), sorted.
	Uncounted []UncountedPod `json:"uncounted,omitempty"`
}

// Scope says which Nodes a report is built over.
type Scope int

const (
	// AllNodes: every Node of the cluster. Pods bound to a node with no
	// Node object appear under a SourceNoNode entry, as the ledger shows
	// them.
	AllNodes Scope = iota
	// SelectedNodes: the Nodes a label selector matched. Pods bound to any
	// other node are left out, SourceNoNode entries too: a node not listed
	// may exist with other labels, and a node that is gone has no labels
	// to match.
	SelectedNodes
)

// Build computes the report over nodes, which scope says are all or some of
// the cluster's, and pods.
func Build(nodes []*v1.Node, pods []*v1.Pod, def int64, scope Scope) Report {
	rep := Report{DefaultCapacity: def, Nodes: make([]Node, 0, len(nodes)), Waiting: []Pod{}}
	index := make(map[string]int, len(nodes))
	rule := underlay.Rule{Default: def, AwaitSource: mirrored(nodes)}
	for _, n := range nodes {
		c := rule.Capacity(n.Annotations, n.Labels)
		out := Node{Name: n.Name, Capacity: c.IPs, Source: c.Source, Origin: c.Origin, Invalid: c.Invalid, DrawsAll: c.DrawsAll, Holders: []Pod{}}
		out.MaxCapacity, out.MaxCapacityInvalid = MaxCapacity(n.Annotations)
		if c.IPAM.Reported {
			v := c.IPAM.Used
			out.IPAMUsed = &v
		}
		if q, ok := n.Status.Allocatable[underlay.Resource]; ok {
			v := q.Value()
			out.Published = &v
		}
		index[n.Name] = len(rep.Nodes)
		rep.Nodes = append(rep.Nodes, out)
	}
	nodeOf := func(name string) *Node {
		i, ok := index[name]
		if !ok {
			if scope == SelectedNodes {
				return nil
			}
			i = len(rep.Nodes)
			index[name] = i
			rep.Nodes = append(rep.Nodes, Node{Name: name, Source: SourceNoNode, Holders: []Pod{}})
		}
		return &rep.Nodes[i]
	}
	for _, p := range pods {
		need := underlay.PodNeed(p)
		if need == 0 {
			// Held without asking on a node whose pool draws all.
			i, ok := index[p.Spec.NodeName]
			if !ok || !rep.Nodes[i].DrawsAll || !underlay.Holds(p.Spec.NodeName, p.Status.Phase) {
				continue
			}
			if ips := underlay.Drawn(need, underlay.PodNetwork(p)); ips > 0 {
				n := &rep.Nodes[i]
				n.charge(ips, p)
				n.Holders = append(n.Holders, Pod{Namespace: p.Namespace, Name: p.Name, IPs: ips, Unasked: true})
			}
			continue
		}
		ref := Pod{Namespace: p.Namespace, Name: p.Name, IPs: need}
		switch {
		case underlay.Holds(p.Spec.NodeName, p.Status.Phase):
			n := nodeOf(p.Spec.NodeName)
			if n == nil {
				continue
			}
			n.charge(need, p)
			n.Holders = append(n.Holders, ref)
		case p.Spec.NodeName == "" && p.Status.Phase == v1.PodPending:
			rep.Waiting = append(rep.Waiting, ref)
			if nn := p.Status.NominatedNodeName; nn != "" {
				if i, ok := index[nn]; ok {
					rep.Nodes[i].Waiting = append(rep.Nodes[i].Waiting, ref)
				}
			}
		}
	}
	for i := range rep.Nodes {
		n := &rep.Nodes[i]
		n.Free = underlay.Free(underlay.Capacity{IPs: n.Capacity, IPAM: ipamReport(n.IPAMUsed)}, underlay.Charges{Pods: n.Used, Unlisted: n.Unlisted})
		sortPods(n.Holders)
		sortPods(n.Waiting)
	}
	sortPods(rep.Waiting)
	sort.Slice(rep.Nodes, func(i, j int) bool { return rep.Nodes[i].Name < rep.Nodes[j].Name })
	rep.Totals = totals(rep.Nodes, len(rep.Waiting))
	return rep
}

// charge counts ips of pod p on n.
func (n *Node) charge(ips int64, p *v1.Pod) {
	n.Used += ips
	if !underlay.Listed(p) {
		n.Unlisted += ips
	}
}

func totals(nodes []Node, waiting int) Totals {
	t := Totals{Nodes: len(nodes), Waiting: waiting}
	for _, n := range nodes {
		t.Capacity += n.Capacity
		t.Used += n.Used
		t.Free += n.Free
		if n.Free == 0 {
			t.Full++
		}
		if n.Invalid != "" {
			t.Invalid++
		}
	}
	return t
}

func sortPods(p []Pod) {
	sort.Slice(p, func(a, b int) bool {
		if p[a].Namespace != p[b].Namespace {
			return p[a].Namespace < p[b].Namespace
		}
		return p[a].Name < p[b].Name
	})
}

// WithUncounted returns rep with the pods among pods that sit in a marked
// namespace (capscale.io/underlay=true), are bound to one of rep's nodes
// and unfinished, are not hostNetwork, and name no underlay IP in any
// container: every such pod takes an IP from the node's IPAM that no
// scheduling mode counts. A pod that asks for 0 said so itself, as the
// admission policy lets it.
func WithUncounted(rep Report, pods []*v1.Pod, marked map[string]bool) Report {
	index := make(map[string]int, len(rep.Nodes))
	for i, n := range rep.Nodes {
		index[n.Name] = i
	}
	nodes := append([]Node(nil), rep.Nodes...)
	rep.Uncounted = nil
	for _, p := range pods {
		if !marked[p.Namespace] || p.Spec.HostNetwork || !underlay.Holds(p.Spec.NodeName, p.Status.Phase) || statesUnderlayIP(p) {
			continue
		}
		i, ok := index[p.Spec.NodeName]
		if !ok {
			continue
		}
		nodes[i].Uncounted++
		rep.Uncounted = append(rep.Uncounted, UncountedPod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName})
	}
	sort.Slice(rep.Uncounted, func(a, b int) bool {
		x, y := rep.Uncounted[a], rep.Uncounted[b]
		if x.Namespace != y.Namespace {
			return x.Namespace < y.Namespace
		}
		return x.Name < y.Name
	})
	rep.Nodes = nodes
	return rep
}

// statesUnderlayIP reports whether any container of pod states capscale.io/underlay-ip
// in its requests or limits, whatever the value.
func statesUnderlayIP(pod *v1.Pod) bool {
	for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			_, r := cs[i].Resources.Requests[underlay.Resource]
			_, l := cs[i].Resources.Limits[underlay.Resource]
			if r || l {
				return true
			}
		}
	}
	return false
}

// mirrored reports whether capscale-controller's capacity-source mirror
// has marked any of nodes: capacity sources are configured, and a node it
// has not read yet counts 0 (underlay.Rule.AwaitSource), as in the
// components the chart configures so.
func mirrored(nodes []*v1.Node) bool {
	for _, n := range nodes {
		if _, ok := n.Annotations[names.UnderlayIPSourceAnnotation]; ok {
			return true
		}
	}
	return false
}

// ipamReport is the report a node's IPAMUsed stands for.
func ipamReport(used *int64) underlay.IPAMReport {
	if used == nil {
		return underlay.IPAMReport{}
	}
	return underlay.IPAMReport{Used: *used, Reported: true}
}
