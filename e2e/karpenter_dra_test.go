//go:build e2e

package e2e

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/underlay"
)

// TestKarpenterDRA: Karpenter v1.14.1 (KWOK provider) with pods Pending on
// capscale.io/underlay-ip in DRA mode, deploy/examples/karpenter with
// TestKarpenterRuleModes's startup taint, Nodes as a kubelet registers
// them (no capscale.io/underlay-ip in their status). Karpenter does not
// know the resource is DRA-backed: it looks for DRA only in a pod's
// resourceClaims (sigs.k8s.io/karpenter pkg/utils/pod/scheduling.go:275-290,
// HasDRARequirements), which such a pod has none of, and
// ignores DRA requests anyway by default (pkg/operator/options/options.go:133,
// --ignore-dra-requests true). It simulates the request as an extended
// resource, which the NodeOverlay's capacity satisfies: it launches the
// minimum, capscale publishes the new nodes' devices, kube-scheduler binds
// every pod, no node over its budget at any poll. And, as in the rule
// modes, it never initializes those NodeClaims: the Node never advertises
// the requested resource (pkg/controllers/nodeclaim/lifecycle/initialization.go:130-146,
// RequestedResourcesRegistered), so it never consolidates them
// (docs/growing-the-cluster.md: native mode grows and shrinks).
func TestKarpenterDRA(t *testing.T) {
	ctx, w := startKarpenterStack(t, stack.Options{DRA: true}, "["+kubeletTaintPatch+"]")
	w.limit = 2 * time.Minute
	stop := actAsKubelet(ctx, t, w)
	const pending = 20 - karpenterStaticNodes*karpenterStaticIPs
	ips := w.grow(ctx, t, "ips", 20, podNeeds(1, "100m"), realExhausted["dra"])
	stripped := stop()
	if want := minNodes(pending, karpenterNodeIPs); ips.launched != want {
		t.Errorf("DRA mode: %d nodes launched, the IPs need %d", ips.launched, want)
	}
	if stripped != ips.launched {
		t.Errorf("the test registered %d launched nodes as a kubelet would, of %d", stripped, ips.launched)
	}
	// Every pod holds devices of its own node: on a launched node, as many
	// as its pods, of the 8 its label gives.
	pods, err := w.s.Client.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onNode := map[string]int{}
	for _, p := range pods.Items {
		onNode[p.Spec.NodeName]++
	}
	claimed, err := claimedPerNode(ctx, w.s)
	if err != nil {
		t.Fatal(err)
	}
	for node, n := range onNode {
		if claimed[node] != n {
			t.Errorf("node %s: %d pods of one IP, its claims hold %d devices", node, n, claimed[node])
		}
	}
	for _, n := range w.launchedNodes(ctx, t) {
		if q, ok := n.Status.Allocatable[underlay.Resource]; ok {
			t.Errorf("node %s advertises %s; a kubelet's does not, and kube-scheduler would count it instead of its devices", n.Name, q.String())
		}
		waitDevices(ctx, t, w.s, n.Name, karpenterNodeIPs, onNode[n.Name])
	}
	reasons := waitUninitialized(ctx, t, w)
	t.Logf("karpenter-growth mode=dra round=ips launched=%d minimum=%d pending-to-bound=%.1fs nodeclaims-initialized=none (%v)",
		ips.launched, minNodes(pending, karpenterNodeIPs), ips.took.Seconds(), reasons)
}
