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

// charged is what the pods on the node take from its pool: their requests
// and, on a draws-all node, one IP for each pod-network pod that asks for
// none (underlay.Drawn).
func charged(nodeInfo fwk.NodeInfo, c underlay.Capacity) int64 {
	used := usedIPs(nodeInfo.GetRequested())
	if !c.DrawsAll {
		return used
	}
	for _, pi := range nodeInfo.GetPods() {
		if p := pi.GetPod(); p != nil {
			used += underlay.Drawn(underlay.PodNeed(p), underlay.PodNetwork(p))
		}
	}
	return used
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
