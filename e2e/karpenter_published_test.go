//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestKarpenterExtenderPublished: extender mode with native mode's
// publisher beside the rule (extender --publish-capacity; the chart's
// extender.publishCapacity), deploy/examples/karpenter as is. The extender
// still filters and binds, kube-scheduler's fit still ignores the
// resource; but every Node advertises the capacity the extender counts by
// (the same rule), and the publisher lifts the NodePool's startup taint
// once it has published it (on the KWOK provider's Nodes it overwrites the
// launching pods' requests, as on a kubelet's it writes the resource
// anew). So Karpenter, which in extender mode alone never initializes a
// NodeClaim (TestKarpenterRuleModes), initializes them and consolidates:
// the burst grows the minimum, and scaled down to what the plane's own
// nodes hold, both launched nodes go, the pods Karpenter moves bound by the
// extender, and at every poll no node over its capacity.
func TestKarpenterExtenderPublished(t *testing.T) {
	ctx, w := startKarpenterStack(t, stack.Options{Extender: true, PublishCapacity: true}, "")
	w.limit = 2 * time.Minute
	const pending = 20 - karpenterStaticNodes*karpenterStaticIPs
	ips := w.grow(ctx, t, "ips", 20, podNeeds(1, "100m"), "underlay IPs exhausted")
	if want := minNodes(pending, karpenterNodeIPs); ips.launched != want {
		t.Errorf("extender mode, publisher beside: %d nodes launched, the IPs need %d", ips.launched, want)
	}
	removed := taintRemovals(t, w.s)
	for _, n := range w.launchedNodes(ctx, t) {
		if q := n.Status.Allocatable[underlay.Resource]; q.Value() != karpenterNodeIPs {
			t.Errorf("node %s publishes %s=%s, want the label's %d", n.Name, names.UnderlayIPResource, q.String(), karpenterNodeIPs)
		}
		if !removed[n.Name] {
			t.Errorf("node %s: no taint removal by the publisher in the audit log", n.Name)
		}
	}
	waitInitialized(ctx, t, w)
	start := time.Now()
	w.shrink(ctx, t, "ips", 6)
	t.Logf("karpenter-growth mode=extender+publisher round=ips launched=%d minimum=%d pending-to-bound=%.1fs consolidated-in=%.1fs",
		ips.launched, minNodes(pending, karpenterNodeIPs), ips.took.Seconds(), time.Since(start).Seconds())
}
