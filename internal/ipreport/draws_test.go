package ipreport

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestBuildDrawsAll (issue 49 §2): a draws-all node lists the pods that
// hold an IP without asking; a hostNetwork pod and a node that draws
// marked pods only list none.
func TestBuildDrawsAll(t *testing.T) {
	all := node("a", map[string]string{names.UnderlayIPSourceCapacityAnnotation: "3", names.UnderlayIPSourceAnnotation: "own x", names.UnderlayIPDrawsAnnotation: underlay.DrawsAll}, nil)
	marked := node("b", map[string]string{names.UnderlayIPSourceCapacityAnnotation: "3", names.UnderlayIPSourceAnnotation: "own y"}, nil)
	host := pod("host", "a", v1.PodRunning, 0)
	host.Spec.HostNetwork = true
	rep := Build([]*v1.Node{all, marked}, []*v1.Pod{pod("m", "a", v1.PodRunning, 1), pod("u", "a", v1.PodRunning, 0), host, pod("u2", "b", v1.PodRunning, 0)}, 10, AllNodes)
	a, b := rep.Nodes[0], rep.Nodes[1]
	if !a.DrawsAll || a.Used != 2 || a.Free != 1 || len(a.Holders) != 2 {
		t.Fatalf("draws-all node: %+v", a)
	}
	if !a.Holders[1].Unasked || a.Holders[1].Name != "u" {
		t.Errorf("holders %+v, want u unasked", a.Holders)
	}
	if b.Used != 0 || len(b.Holders) != 0 {
		t.Errorf("marked node: %+v", b)
	}
}
