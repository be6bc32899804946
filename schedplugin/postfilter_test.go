package schedplugin

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// statuses is a NodeToStatusReader of fixed statuses; absent nodes are
// UnschedulableAndUnresolvable, as the framework's default.
type statuses map[string]*fwk.Status

func (s statuses) Get(node string) *fwk.Status {
	if st, ok := s[node]; ok {
		return st
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable)
}

func (s statuses) NodesForStatusCode(fwk.NodeInfoLister, fwk.Code) ([]fwk.NodeInfo, error) {
	return nil, nil
}

// usedNodes are NodeInfos by name.
type usedNodes map[string]usedInfo

func (u usedNodes) Get(name string) (fwk.NodeInfo, error) {
	if ni, ok := u[name]; ok {
		return ni, nil
	}
	return nil, fmt.Errorf("node %s not in the snapshot", name)
}

// TestPostFilterWaitsForHolds: a pod nominated to a node that is full only
// because of a force-deleted pod's held IP ends the PostFilter chain
// (UnschedulableAndUnresolvable), so DefaultPreemption evicts no second
// victim; in every other case it passes to preemption (Unschedulable).
func TestPostFilterWaitsForHolds(t *testing.T) {
	refused := fwk.NewStatus(fwk.Unschedulable, "underlay IPs exhausted").WithPlugin(Name)
	for _, tc := range []struct {
		name      string
		nominated string
		held      bool
		used      int64
		status    *fwk.Status
		want      fwk.Code
	}{
		{name: "nominated node full only for the hold", nominated: "n1", held: true, used: 1, status: refused, want: fwk.UnschedulableAndUnresolvable},
		{name: "not nominated", held: true, used: 1, status: refused, want: fwk.Unschedulable},
		{name: "no hold", nominated: "n1", used: 2, status: refused, want: fwk.Unschedulable},
		{name: "full without the hold too", nominated: "n1", held: true, used: 2, status: refused, want: fwk.Unschedulable},
		{name: "another plugin refused the node", nominated: "n1", held: true, used: 1,
			status: fwk.NewStatus(fwk.Unschedulable, "taint").WithPlugin("TaintToleration"), want: fwk.Unschedulable},
		{name: "nominated to a node the snapshot lacks", nominated: "gone", held: true, used: 1, status: refused, want: fwk.Unschedulable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, _, _ := heldPlugin()
			node := ipNode("n1", "2")
			pl.nodeInfos = usedNodes{"n1": {node: node, used: tc.used}}
			if tc.held {
				pl.holds.deleted(forceDeleted(ipPod("victim", "n1", 1)))
			}
			pod := ipPod("preemptor", "", 1)
			pod.Status.NominatedNodeName = tc.nominated
			m := statuses{"n1": tc.status, "gone": tc.status}
			r, st := pl.PostFilter(context.Background(), nil, pod, m)
			if st.Code() != tc.want || r != nil {
				t.Fatalf("PostFilter = %v, %v; want %v and no result (the nomination stays)", r, st, tc.want)
			}
		})
	}
}

// TestPostFilterWithoutHandle: a plugin built without the framework's
// informers (no holds, no snapshot) never stops preemption.
func TestPostFilterWithoutHandle(t *testing.T) {
	pl := &Plugin{}
	pod := ipPod("preemptor", "", 1)
	pod.Status = v1.PodStatus{NominatedNodeName: "n1"}
	if _, st := pl.PostFilter(context.Background(), nil, pod, statuses{}); st.Code() != fwk.Unschedulable {
		t.Fatalf("PostFilter = %v, want Unschedulable", st)
	}
}
