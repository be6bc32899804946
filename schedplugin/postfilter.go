package schedplugin

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/underlay"
)

// PostFilter keeps kube-scheduler's preemption from evicting pods for IPs
// that come back by themselves. It must run before DefaultPreemption (the
// profile names it under postFilter, deploy/plugin says so).
//
// A preemption victim whose grace is 0 leaves the API at once, and its IP
// is held until its node can have released it (holds.go). kube-scheduler
// waits for a victim that is still terminating on the nominated node
// (DefaultPreemption's PodEligibleToPreemptOthers) but cannot see a held
// IP, so the preemptor, still refused there, would evict again: another
// victim each cycle, across every node, until the first hold ended. Here a
// nominee whose nominated node is full only because of holds is
// UnschedulableAndUnresolvable, which ends the PostFilter chain before
// preemption and keeps the nomination; the hold's end activates it.
func (pl *Plugin) PostFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if pl.sourced != nil && pl.takesIPs(state, pod) {
		// Once per cycle that placed it nowhere, not per node Filter
		// refused: a change the sources' view reads wakes it.
		pl.sourced.turnedAway(pod)
	}
	node := pl.nominatedNode(pod)
	if node == "" || pl.holds == nil || pl.nodeInfos == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	// Only the node this plugin refused: another plugin's refusal is not
	// lifted by a hold's end.
	if st := m.Get(node); st.Code() != fwk.Unschedulable || st.Plugin() != Name {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	ni, err := pl.nodeInfos.Get(node)
	if err != nil || ni.Node() == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	c := pl.capacity(ni.Node())
	charge := underlay.Charge(need(state, pod), underlay.PodNetwork(pod), c.DrawsAll)
	if !heldOnly(charge, c, pl.charges(ni, c)) {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	// Filter noted the pod: the hold's end activates it.
	return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
		"not preempting: nominated node "+node+" fits once the IPs held for force-deleted pods are back")
}

// nominatedNode is the pod's nominated node as the scheduler's informer
// last saw it (DefaultPreemption reads it there too), else as given.
func (pl *Plugin) nominatedNode(pod *v1.Pod) string {
	if pl.pods != nil {
		if latest, err := pl.pods.Pods(pod.Namespace).Get(pod.Name); err == nil {
			return latest.Status.NominatedNodeName
		}
	}
	return pod.Status.NominatedNodeName
}

// postFilterInputs are what PostFilter reads from the framework handle: the
// scheduler's pod lister and its snapshot's NodeInfos.
func (pl *Plugin) postFilterInputs(fh fwk.Handle) {
	if fh == nil || fh.SharedInformerFactory() == nil {
		return
	}
	pl.pods = fh.SharedInformerFactory().Core().V1().Pods().Lister()
	pl.nodeInfos = snapshotNodes{fh}
}

// snapshotNodes reads a NodeInfo from the handle's latest snapshot, which
// the framework replaces every cycle.
type snapshotNodes struct{ fh fwk.Handle }

func (s snapshotNodes) Get(name string) (fwk.NodeInfo, error) {
	return s.fh.SnapshotSharedLister().NodeInfos().Get(name)
}

// nodeInfoGetter is the one NodeInfoLister method PostFilter needs.
type nodeInfoGetter interface {
	Get(name string) (fwk.NodeInfo, error)
}
