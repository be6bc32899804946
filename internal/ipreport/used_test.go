package ipreport

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/names"
)

// TestBuildIPAMUsed: a node whose IPAM reports more IPs in use than its
// pods hold (a force-deleted pod's sandbox not yet torn down) shows the
// IPAM's figure and is free only of what both agree on.
func TestBuildIPAMUsed(t *testing.T) {
	reported := node("a", map[string]string{names.UnderlayIPCapacityAnnotation: "10", names.UnderlayIPSourceUsedAnnotation: "10"}, nil)
	plain := node("b", capacityOf("10"), nil)
	var pods []*v1.Pod
	for _, n := range []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9"} {
		pods = append(pods, pod(n, "a", v1.PodRunning, 1))
	}
	rep := Build([]*v1.Node{reported, plain}, pods, 10, AllNodes)
	a, b := rep.Nodes[0], rep.Nodes[1]
	if a.IPAMUsed == nil || *a.IPAMUsed != 10 || a.Used != 9 || a.Free != 0 {
		t.Fatalf("node a = %+v, want used 9, IPAM 10, free 0", a)
	}
	if b.IPAMUsed != nil || b.Free != 10 {
		t.Fatalf("node b = %+v, want no IPAM figure, free 10", b)
	}
	if rep.Totals.Full != 1 {
		t.Errorf("totals %+v, want node a full", rep.Totals)
	}
}
