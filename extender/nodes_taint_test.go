package extender

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/names"
)

// TestCompactNodeKeepsTheStartupTaint: the node cache keeps capscale's
// startup taint, which the publisher removes, and no other taint.
func TestCompactNodeKeepsTheStartupTaint(t *testing.T) {
	n := &v1.Node{Spec: v1.NodeSpec{Taints: []v1.Taint{
		{Key: "karpenter.sh/disrupted", Effect: v1.TaintEffectNoSchedule},
		{Key: names.UnderlayIPUnpublishedTaint, Effect: v1.TaintEffectNoSchedule},
	}}}
	got := CompactNode(n).Spec.Taints
	if len(got) != 1 || got[0].Key != names.UnderlayIPUnpublishedTaint {
		t.Fatalf("compact taints %+v, want the startup taint alone", got)
	}
	if got := CompactNode(&v1.Node{}).Spec.Taints; got != nil {
		t.Fatalf("compact taints of an untainted node %+v, want none", got)
	}
}
