package schedplugin

import (
	"strconv"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/underlay"
)

// The decisions of the plugin as plain functions over plain values; plugin.go
// only reads the framework's objects and calls them.

// usedIPs is what the pods the scheduler counts on a node hold: its
// NodeInfo's sum of their effective requests of capscale.io/underlay-ip.
// kube-scheduler keeps that sum with the same component-helpers rule as
// underlay.PodNeed, in its own cache: bound pods, assumed pods (a bind in
// flight), nominated pods added for the filter, and victims removed by a
// preemption dry run are all in it, so the plugin needs no cache of its own
// and reads it in O(1) instead of walking the node's pods.
func usedIPs(requested fwk.Resource) int64 {
	if requested == nil {
		return 0
	}
	return requested.GetScalarResources()[underlay.Resource]
}

// verdict is the filter's decision for one node.
type verdict struct {
	// code is fwk.Success, fwk.Unschedulable or fwk.UnschedulableAndUnresolvable.
	code fwk.Code
	// reason names the IPs: used and capacity, or why capacity is 0.
	reason string
}

// fit decides whether need IPs fit a node of capacity c that holds used.
//
// A node whose whole capacity is smaller than need (0, or invalid and so 0)
// is UnschedulableAndUnresolvable: evicting pods cannot help, and the
// framework's preemption skips such nodes. A node that is merely full is
// Unschedulable, so that preemption may evict lower-priority pods that hold
// its IPs; its dry run removes them from the NodeInfo and runs Filter again,
// which is what makes preemption IP-aware in plugin mode.
func fit(need int64, c underlay.Capacity, used int64) verdict {
	switch {
	case need <= 0:
		return verdict{code: fwk.Success}
	case c.Invalid != "":
		return verdict{code: fwk.UnschedulableAndUnresolvable, reason: c.Invalid + ", pod needs " + itoa(need)}
	case need > c.IPs:
		return verdict{code: fwk.UnschedulableAndUnresolvable,
			reason: "underlay IP capacity too small: node has " + itoa(c.IPs) + ", pod needs " + itoa(need)}
	case used+need > c.IPs:
		return verdict{code: fwk.Unschedulable,
			reason: "underlay IPs exhausted: " + itoa(used) + "/" + itoa(c.IPs) + " used, pod needs " + itoa(need)}
	}
	return verdict{code: fwk.Success}
}

// heldOnly: need would fit the node of capacity c but for the IPs held for
// force-deleted pods (ch.Held), which come back by themselves when their
// holds end. Where the IPAM's report alone makes the node full, it is not.
func heldOnly(need int64, c underlay.Capacity, ch underlay.Charges) bool {
	held := ch.Held
	ch.Held = 0
	return held > 0 && fit(need, c, underlay.Charged(ch, c.IPAM)).code == fwk.Success
}

// freeIPs is the node's score before normalisation: the count of IPs left,
// never negative.
func freeIPs(c underlay.Capacity, used int64) int64 {
	return underlay.Free(c, underlay.Charges{Pods: used})
}

// normalize maps free-IP counts, in place, to the framework's scale: the
// nodes with the most free IPs get MaxScore, every other node MinScore.
//
// That is the extender's "keep only the nodes with the most free IPs",
// expressed as a score: with the plugin's weight above the sum of the other
// score plugins' weights (deploy/ sets it), a node with more free IPs always
// wins, by count and whatever the capacities (5 free of 10 beats 2 free of
// 3), and kube-scheduler's own scores break the ties among the nodes with
// the most. A proportional scale would let a node with 99 free lose to one
// with 100 on a difference of one point.
func normalize(scores fwk.NodeScoreList) {
	var best int64
	for _, s := range scores {
		best = max(best, s.Score)
	}
	for i := range scores {
		if best > 0 && scores[i].Score == best {
			scores[i].Score = maxScore
		} else {
			scores[i].Score = minScore
		}
	}
}

// Queueing hints: whether an event may make a pod this plugin rejected fit.
// Each is a plain function of the pod's need and the objects of the event;
// none reads the scheduler's snapshot (the framework forbids it in hints).

// podFreesIPs: a pod that held IPs on a node went away. kube-scheduler
// sends this event for an assigned pod deleted or finished (its pod informer
// drops Succeeded and Failed pods, which it sees as a delete), and also for
// an unbound pod nominated to a node (status.nominatedNodeName) that is
// deleted or whose nomination is cleared or moved: Filter counted the
// nominee's IPs on that node for every pod of lower or equal priority, so
// its exit frees them too (NodeResourcesFit's hint answers the same way).
// Only a pod that needs IPs frees any, or, once some node draws all
// (drawsAll), any pod on the pod network: the hint cannot read the node.
func podFreesIPs(gone *v1.Pod, drawsAll bool) bool {
	return gone != nil && (gone.Spec.NodeName != "" || gone.Status.NominatedNodeName != "") &&
		(underlay.PodNeed(gone) > 0 || drawsAll && underlay.PodNetwork(gone))
}

// nodeAddedFits: a new node can take the pod if its whole capacity can.
func nodeAddedFits(need int64, node *v1.Node, rule underlay.Rule) bool {
	if node == nil {
		return false
	}
	c := rule.Capacity(node.Annotations, node.Labels)
	return c.Invalid == "" && c.IPs >= need
}

// capacityGrew: a node's annotations or labels changed and its capacity
// went up to at least the pod's need. A lower or equal capacity frees
// nothing; every other annotation or label change is not ours.
func capacityGrew(need int64, oldNode, newNode *v1.Node, rule underlay.Rule) bool {
	if oldNode == nil || newNode == nil {
		return nodeAddedFits(need, newNode, rule)
	}
	before := rule.Capacity(oldNode.Annotations, oldNode.Labels)
	after := rule.Capacity(newNode.Annotations, newNode.Labels)
	// An invalid capacity counts as 0 (before.IPs is 0 then).
	return after.Invalid == "" && after.IPs >= need && after.IPs > before.IPs
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
