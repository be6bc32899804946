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
	// Published is the capacity in the Node's status.allocatable, as
	// native mode publishes it; nil when not published.
	Published *int64 `json:"published,omitempty"`
	Used      int64  `json:"used"`
	// Free is Capacity - Used, never below 0.
	Free int64 `json:"free"`
	// Holders are the pods holding IPs on the node, sorted.
	Holders []Pod `json:"holders"`
	// Waiting are the Pending underlay pods nominated to this node
	// (status.nominatedNodeName: preemption made room for them here).
	Waiting []Pod `json:"waiting,omitempty"`
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
	for _, n := range nodes {
		c := underlay.NodeCapacity(n.Annotations, n.Labels, def)
		out := Node{Name: n.Name, Capacity: c.IPs, Source: c.Source, Origin: c.Origin, Invalid: c.Invalid, Holders: []Pod{}}
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
			continue
		}
		ref := Pod{Namespace: p.Namespace, Name: p.Name, IPs: need}
		switch {
		case underlay.Holds(p.Spec.NodeName, p.Status.Phase):
			n := nodeOf(p.Spec.NodeName)
			if n == nil {
				continue
			}
			n.Used += need
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
		n.Free = max(n.Capacity-n.Used, 0)
		sortPods(n.Holders)
		sortPods(n.Waiting)
	}
	sortPods(rep.Waiting)
	sort.Slice(rep.Nodes, func(i, j int) bool { return rep.Nodes[i].Name < rep.Nodes[j].Name })
	rep.Totals = totals(rep.Nodes, len(rep.Waiting))
	return rep
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
