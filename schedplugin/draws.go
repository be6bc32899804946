package schedplugin

import (
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/underlay"
)

// Pods that draw from a node's pool without asking (issue 49 §2).
//
// kube-scheduler's NodeInfo sums only requests, so on a node whose pool
// draws all, the pod-network pods that ask for no IP (pods created before
// capscale's draws-all admission policy, or exempt from it) are added here
// from the node's pods, and the pod being scheduled is charged by
// underlay.Charge. A node that draws only marked pods costs nothing more.

// charged is what the pods on the node take from its pool (the holds are
// the caller's): their requests and, on a draws-all node, one IP for each
// pod-network pod that asks for none (underlay.Drawn); and, where the
// node's IPAM reports what it holds, the part of it whose pods have no IP
// yet (underlay.Listed: assumed and nominated pods, and bound pods before
// their CNI ADD), which the IPAM cannot list. Only then are the node's pods
// walked for what asks: elsewhere the NodeInfo's sum answers in O(1).
func charged(nodeInfo fwk.NodeInfo, c underlay.Capacity) underlay.Charges {
	ch := underlay.Charges{Pods: usedIPs(nodeInfo.GetRequested())}
	if !c.DrawsAll && !c.IPAM.Reported {
		return ch
	}
	for _, pi := range nodeInfo.GetPods() {
		p := pi.GetPod()
		if p == nil {
			continue
		}
		own := underlay.PodNeed(p)
		if c.DrawsAll {
			drawn := underlay.Drawn(own, underlay.PodNetwork(p))
			ch.Pods += drawn
			own += drawn
		}
		if c.IPAM.Reported && !underlay.Listed(p) {
			ch.Unlisted += own
		}
	}
	return ch
}

// anyDrawsAll reports whether some node draws all. PreFilter asks it only
// for a pod-network pod that asks for no IP; in a cluster with a draws-all
// source the first node usually answers, elsewhere it is one reading per
// node from the capacity memo.
func (pl *Plugin) anyDrawsAll(nodes []fwk.NodeInfo) bool {
	for _, ni := range nodes {
		if n := ni.Node(); n != nil && pl.capacity(n).DrawsAll {
			return true
		}
	}
	return false
}

// charges are what the rule charges on the node: its pods' (charged) and
// the holds of force-deleted pods there.
func (pl *Plugin) charges(nodeInfo fwk.NodeInfo, c underlay.Capacity) underlay.Charges {
	ch := charged(nodeInfo, c)
	if n := nodeInfo.Node(); n != nil {
		ch.Held = pl.holds.chargeOn(n.Name, c)
	}
	return ch
}
