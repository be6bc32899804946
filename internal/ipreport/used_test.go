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

// TestBuildIPAMUnion (issue 55 §3): a pod bound before its CNI ADD is not
// in the IPAM's report yet; the node is free only of what neither holds.
func TestBuildIPAMUnion(t *testing.T) {
	reported := node("a", map[string]string{names.UnderlayIPCapacityAnnotation: "4", names.UnderlayIPSourceUsedAnnotation: "3"}, nil)
	var pods []*v1.Pod
	for _, n := range []string{"a1", "a2"} {
		p := pod(n, "a", v1.PodRunning, 1)
		p.Status.PodIPs = []v1.PodIP{{IP: "192.0.2.10"}}
		pods = append(pods, p)
	}
	pods = append(pods, pod("b", "a", v1.PodPending, 1))
	a := Build([]*v1.Node{reported}, pods, 10, AllNodes).Nodes[0]
	if a.Used != 3 || a.Unlisted != 1 || a.Free != 0 {
		t.Fatalf("node a = %+v, want used 3, 1 with no IP yet, free 0", a)
	}
}
