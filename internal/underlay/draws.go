package underlay

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/names"
)

// Which pods draw from a node's pool (issue 49 §2), and the capacity of a
// node the mirror has not read yet (§4): the rest of the one rule.

// The values of the capscale.io/underlay-ip-draws annotation.
const (
	// DrawsAll: every pod of the node that is not hostNetwork takes an IP
	// from the pool (Cilium ENI/Azure/multi-pool's default pool, Azure
	// CNS).
	DrawsAll = "all"
	// DrawsMarked: only pods that ask for capscale.io/underlay-ip take one
	// (a separate underlay pool). A node without the annotation draws so.
	DrawsMarked = "marked"
)

// withDraws adds the draws annotation's reading to c. A value other than
// all or marked (a hand edit) makes the capacity invalid: which pods to
// count is unknown, and a guess could over-commit.
func withDraws(c Capacity, annotations map[string]string) Capacity {
	v, ok := annotations[names.UnderlayIPDrawsAnnotation]
	switch {
	case !ok || v == DrawsMarked:
		return c
	case v == DrawsAll:
		c.DrawsAll = true
		return c
	}
	c.IPs = 0
	c.Invalid = fmt.Sprintf("invalid %s annotation %q (want %s or %s), treating capacity as 0", names.UnderlayIPDrawsAnnotation, v, DrawsAll, DrawsMarked)
	return c
}

// Rule is the capacity rule as a component is configured.
type Rule struct {
	// Default is the capacity of a node that sets none (--default-capacity).
	Default int64
	// AwaitSource is set where capacity sources are configured (the chart
	// and deploy/capacity-sources set it on every component): a node with
	// neither the capacity annotation nor the mirror's mark (a mirrored
	// capacity, or capscale.io/underlay-ip-source: none for a node no
	// source covers) has not been read yet and counts 0, never the label
	// or the default, which a new node would otherwise take for the
	// seconds (minutes, at a fresh install of thousands of nodes) before
	// the mirror reaches it.
	AwaitSource bool
}

// NotReadYet is the reason of a node's capacity while its capacity
// sources are not read: by capscale-controller's mirror, or, where
// capscale-scheduler reads them itself (its capacitySources), by it.
const NotReadYet = "capacity source not read yet: no reading of this node's capacity sources (the mirror's " +
	names.UnderlayIPSourceCapacityAnnotation + ", or " + names.UnderlayIPSourceAnnotation + ": " + names.UnderlayIPSourceNone +
	"; or capscale-scheduler's own read), treating capacity as 0"

// Capacity is NodeCapacity under r.
func (r Rule) Capacity(annotations, labels map[string]string) Capacity {
	if r.AwaitSource && !Read(annotations) {
		return withDraws(Capacity{Source: SourceIPAM, Invalid: NotReadYet, Unread: true}, annotations)
	}
	return NodeCapacity(annotations, labels, r.Default)
}

// Read reports whether a node's capacity does not wait for the mirror: it
// has the per-node capacity annotation (the override wins anyway), a
// mirrored capacity, or the mirror's mark that no source covers it.
func Read(annotations map[string]string) bool {
	if _, ok := annotations[names.UnderlayIPCapacityAnnotation]; ok {
		return true
	}
	if _, ok := annotations[names.UnderlayIPSourceCapacityAnnotation]; ok {
		return true
	}
	return annotations[names.UnderlayIPSourceAnnotation] == names.UnderlayIPSourceNone
}

// PodNetwork reports whether pod is on the pod network (not hostNetwork),
// and so takes an IP from a draws-all node's pool.
func PodNetwork(pod *v1.Pod) bool { return pod != nil && !pod.Spec.HostNetwork }

// Charge is what a pod needing need IPs takes from the pool of a node:
// its need, and at least one IP when the node draws all and the pod is on
// the pod network. Every consumer charges a pod through it (or Drawn).
func Charge(need int64, podNetwork, drawsAll bool) int64 {
	if drawsAll && podNetwork {
		return max(need, 1)
	}
	return need
}

// PodCharge is Charge of pod on a node of capacity c.
func PodCharge(pod *v1.Pod, c Capacity) int64 {
	return Charge(PodNeed(pod), PodNetwork(pod), c.DrawsAll)
}

// Drawn is what a pod charges a draws-all node beyond its need:
// Charge(need, podNetwork, true) − need, 1 for a pod-network pod that asks
// for no IP. A ledger that sums needs (or reads kube-scheduler's sum of
// requests) keeps the sum of Drawn beside it: a node's charges are then
// its needs plus, when it draws all, its drawn.
func Drawn(need int64, podNetwork bool) int64 {
	return Charge(need, podNetwork, true) - need
}
