//go:build e2e

package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestKarpenterPlugin: what Karpenter does in plugin mode, where no Node
// advertises capscale.io/underlay-ip and capscale-scheduler's plugin
// enforces the rule. The NodePool is the example's without the startup
// taint (no publisher removes it here).
func TestKarpenterPlugin(t *testing.T) {
	ctx, w := startKarpenterStack(t, stack.Options{Plugin: true}, `[{"op":"remove","path":"/spec/template/spec/startupTaints"}]`)
	w.limit = 90 * time.Second
	ips := w.grow(ctx, t, "ips", 20, podNeeds(1, "100m"), "underlay IPs exhausted")
	t.Logf("karpenter-growth mode=plugin round=ips launched=%d minimum=%d pending-to-bound=%.1fs", ips.launched, minNodes(20-8, karpenterNodeIPs), ips.took.Seconds())
	for _, n := range w.launchedNodes(ctx, t) {
		t.Logf("node %s allocatable %s=%v", n.Name, names.UnderlayIPResource, n.Status.Allocatable[corev1.ResourceName(names.UnderlayIPResource)])
	}
}
