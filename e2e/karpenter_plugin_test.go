//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestKarpenterPlugin: what Karpenter does in plugin mode, where capscale
// publishes nothing and capscale-scheduler's plugin enforces the rule. The
// NodePool is the example's without the startup taint (no publisher
// removes it here). Karpenter acts on the pods the plugin marks
// unschedulable and sizes new nodes by the NodeOverlay, so it launches the
// minimum and no node goes over; but the new Nodes advertise the resource
// only because the KWOK provider copies the launching pods' requests into
// their status (kwok/cloudprovider/cloudprovider.go, toNode): 12 of the 16
// IPs the label gives them. A real kubelet writes nothing of the kind:
// TestKarpenterRuleModes runs plugin mode on Nodes as a kubelet registers
// them (docs/growing-the-cluster.md).
func TestKarpenterPlugin(t *testing.T) {
	ctx, w := startKarpenterStack(t, stack.Options{Plugin: true}, `[{"op":"remove","path":"/spec/template/spec/startupTaints"}]`)
	w.limit = 2 * time.Minute
	const pending = 20 - karpenterStaticNodes*karpenterStaticIPs
	ips := w.grow(ctx, t, "ips", 20, podNeeds(1, "100m"), "underlay IPs exhausted")
	if want := minNodes(pending, karpenterNodeIPs); ips.launched != want {
		t.Errorf("plugin mode: %d nodes launched, the IPs need %d", ips.launched, want)
	}
	advertised := 0
	for _, n := range w.launchedNodes(ctx, t) {
		q := n.Status.Allocatable[underlay.Resource]
		advertised += int(q.Value())
	}
	if advertised != pending {
		t.Errorf("the launched nodes advertise %d %s; want the %d the KWOK provider copies from the launching pods", advertised, names.UnderlayIPResource, pending)
	}
	t.Logf("karpenter-growth mode=plugin round=ips launched=%d minimum=%d pending-to-bound=%.1fs advertised=%d", ips.launched, minNodes(pending, karpenterNodeIPs), ips.took.Seconds(), advertised)
}
