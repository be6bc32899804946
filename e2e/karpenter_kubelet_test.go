//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// kubeletRegistering is the NodePool's startup taint in
// TestKarpenterRuleModes: it keeps pods off a launched node until the
// test, standing in for the node's kubelet, has given the Node the status
// a kubelet would.
const kubeletRegistering = "e2e.capscale.io/kubelet-registering"

// TestKarpenterRuleModes: what Karpenter does in the modes where capscale
// publishes nothing (extender: the extender's ledger; plugin:
// capscale-scheduler's UnderlayIP), on Nodes as a kubelet registers them.
// The KWOK provider copies the launching pods' requests into a new Node's
// status (kwok/cloudprovider/cloudprovider.go, toNode); a kubelet
// advertises no capscale.io/underlay-ip, so the test removes it from each
// launched Node before lifting the NodePool's startup taint. Both modes
// tell kube-scheduler's fit to ignore the resource (the extender's
// managedResources ignoredByScheduler, the plugin's NodeResourcesFit
// ignoredResources), and a kubelet admits a pod whose extended resource
// its node lacks (pkg/kubelet/lifecycle/predicate.go,
// removeMissingExtendedResources, v1.37.2). Karpenter provisions for the
// pods the rule leaves unschedulable by the NodeOverlay: it launches the
// minimum, every pod binds, no node goes over its label's capacity. But
// the NodeClaims are never initialized (the requested resource is not
// registered, pkg/controllers/nodeclaim/lifecycle/initialization.go
// RequestedResourcesRegistered, v1.14.1), and Karpenter disrupts no
// uninitialized node (pkg/controllers/state/statenode.go
// ValidateNodeDisruptable): the cluster grows and never consolidates.
func TestKarpenterRuleModes(t *testing.T) {
	for _, m := range ruleModes {
		t.Run(m.name, func(t *testing.T) {
			ctx, w := startKarpenterStack(t, m.o, "["+kubeletTaintPatch+"]")
			w.limit = 2 * time.Minute
			stop := actAsKubelet(ctx, t, w)
			const pending = 20 - karpenterStaticNodes*karpenterStaticIPs
			ips := w.grow(ctx, t, "ips", 20, podNeeds(1, "100m"), "underlay IPs exhausted")
			stripped := stop()
			if want := minNodes(pending, karpenterNodeIPs); ips.launched != want {
				t.Errorf("%s mode: %d nodes launched, the IPs need %d", m.name, ips.launched, want)
			}
			if stripped != ips.launched {
				t.Errorf("the test registered %d launched nodes as a kubelet would, of %d", stripped, ips.launched)
			}
			for _, n := range w.launchedNodes(ctx, t) {
				if q, ok := n.Status.Allocatable[underlay.Resource]; ok {
					t.Errorf("node %s advertises %s=%s; a kubelet's does not", n.Name, names.UnderlayIPResource, q.String())
				}
			}
			reasons := waitUninitialized(ctx, t, w)
			t.Logf("karpenter-growth mode=%s round=ips launched=%d minimum=%d pending-to-bound=%.1fs nodeclaims-initialized=none (%v)",
				m.name, ips.launched, minNodes(pending, karpenterNodeIPs), ips.took.Seconds(), reasons)
		})
	}
}

// ruleModes are the modes where capscale publishes nothing.
var ruleModes = []struct {
	name string
	o    stack.Options
}{{"extender", stack.Options{Extender: true}}, {"plugin", stack.Options{Plugin: true}}}

// kubeletTaintPatch gives the NodePool the startup taint actAsKubelet lifts
// in place of capscale's, which nothing removes in these modes.
var kubeletTaintPatch = fmt.Sprintf(`{"op":"replace","path":"/spec/template/spec/startupTaints","value":[{"key":%q,"effect":"NoSchedule"}]}`, kubeletRegistering)

// TestKarpenterRuleModesSource: TestKarpenterRuleModes's modes with
// TestKarpenterCapacitySource's burst: every node's capacity from
// whereabouts' node slices (the selector-less source, the NodePool
// without the capacity label), Nodes as a kubelet registers them, and
// whereabouts' controller paused while the new nodes join. The extender's
// ledger and the plugin count a node the mirror has not read 0
// (--await-capacity-source, awaitCapacitySource), so no pod lands on a new
// node before its slice is read, although the test lifts the node's startup
// taint at once: at every poll a node holds at most what its slice gives
// once read, nothing before; Karpenter launches the minimum, and again
// never initializes a NodeClaim.
func TestKarpenterRuleModesSource(t *testing.T) {
	patch := "[" + kubeletTaintPatch + `,{"op":"remove","path":"/spec/template/metadata/labels/capscale.io~1underlay-ip-capacity"}]`
	for _, m := range ruleModes {
		t.Run(m.name, func(t *testing.T) {
			ctx, w, slicer := startKarpenterSliced(t, m.o, patch)
			stop := actAsKubelet(ctx, t, w)
			const replicas = 26
			pending := replicas - karpenterStaticNodes*karpenterSliceIPs
			want := minNodes(pending, karpenterSliceIPs)
			resumed := pauseUntilLaunched(ctx, t, w, slicer, want)
			g := w.grow(ctx, t, "slices", replicas, podNeeds(1, "100m"), "underlay IPs exhausted")
			sliced := resumed()
			stripped := stop()
			if g.launched != want {
				t.Errorf("%s mode, slices of %d: %d nodes launched, the IPs need %d", m.name, karpenterSliceIPs, g.launched, want)
			}
			if stripped != g.launched {
				t.Errorf("the test registered %d launched nodes as a kubelet would, of %d", stripped, g.launched)
			}
			for _, n := range w.launchedNodes(ctx, t) {
				got, src := n.Annotations[names.UnderlayIPSourceCapacityAnnotation], n.Annotations[names.UnderlayIPSourceAnnotation]
				if got != fmt.Sprint(karpenterSliceIPs) || !strings.HasPrefix(src, "whereabouts nodeslicepools.whereabouts.cni.cncf.io/") {
					t.Errorf("node %s: capscale read %q from %q, want its slice's %d from whereabouts' NodeSlicePool", n.Name, got, src, karpenterSliceIPs)
				}
				if q, ok := n.Status.Allocatable[underlay.Resource]; ok {
					t.Errorf("node %s advertises %s=%s; a kubelet's does not", n.Name, names.UnderlayIPResource, q.String())
				}
			}
			reasons := waitUninitialized(ctx, t, w)
			t.Logf("karpenter-growth mode=%s source=whereabouts-node-slice launched=%d minimum=%d pending-to-bound=%.1fs sliced-to-bound=%.1fs nodeclaims-initialized=none (%d)",
				m.name, g.launched, want, g.took.Seconds(), g.bound.Sub(sliced).Seconds(), len(reasons))
		})
	}
}

// actAsKubelet, until the returned stop is called, does to every node
// Karpenter launches what its kubelet's registration would: no
// capscale.io/underlay-ip in its status, then the NodePool's startup taint
// lifted. stop returns how many nodes it did so.
func actAsKubelet(ctx context.Context, t *testing.T, w *growthWatch) (stop func() int) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan int)
	go func() {
		registered := map[string]bool{}
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			nodes, err := w.s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodepool"})
			if err != nil {
				return false, nil
			}
			for i := range nodes.Items {
				if err := registerAsKubelet(ctx, w, &nodes.Items[i]); errors.Is(err, errNotReady) {
					continue
				} else if err != nil {
					t.Logf("registering %s as a kubelet would: %v (retried)", nodes.Items[i].Name, err)
				} else {
					registered[nodes.Items[i].Name] = true
				}
			}
			return false, nil
		})
		done <- len(registered)
	}()
	stop = sync.OnceValue(func() int {
		cancel()
		return <-done
	})
	t.Cleanup(func() { stop() })
	return stop
}

// errNotReady: kwok has not made the node Ready yet.
var errNotReady = errors.New("not Ready yet")

// registerAsKubelet removes the resource from n's status, then the startup
// taint; a node already without both is left alone. It waits for the node
// to be Ready: until then kwok's node-initialize stage may still write the
// status from its own copy, the resource included (its allocatable and
// capacity are those it read), and a node with the taint lifted and the
// resource back is one Karpenter initializes.
func registerAsKubelet(ctx context.Context, w *growthWatch, n *corev1.Node) error {
	if !plane.NodeReady(n) {
		return errNotReady
	}
	key := "capscale.io~1underlay-ip" // the resource as a JSON pointer token
	var ops []map[string]any
	if _, ok := n.Status.Capacity[underlay.Resource]; ok {
		ops = append(ops, map[string]any{"op": "remove", "path": "/status/capacity/" + key})
	}
	if _, ok := n.Status.Allocatable[underlay.Resource]; ok {
		ops = append(ops, map[string]any{"op": "remove", "path": "/status/allocatable/" + key})
	}
	if len(ops) > 0 {
		patch, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		if _, err := w.s.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("removing %s from the status: %w", names.UnderlayIPResource, err)
		}
	}
	var keep []corev1.Taint
	for _, tt := range n.Spec.Taints {
		if tt.Key != kubeletRegistering {
			keep = append(keep, tt)
		}
	}
	if len(keep) == len(n.Spec.Taints) {
		return nil
	}
	// The taints as read must still be there: Karpenter's registration
	// writes them too.
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/spec/taints", "value": n.Spec.Taints},
		{"op": "replace", "path": "/spec/taints", "value": keep},
	})
	if err != nil {
		return err
	}
	if _, err := w.s.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("lifting %s: %w", kubeletRegistering, err)
	}
	return nil
}

// waitUninitialized waits until Karpenter says of every NodeClaim that it
// is not initialized for the unregistered resource alone, fails if one is
// initialized, and returns the reasons.
func waitUninitialized(ctx context.Context, t *testing.T, w *growthWatch) map[string]string {
	t.Helper()
	want := fmt.Sprintf("ResourceNotRegistered: Resource %q was requested but not registered", names.UnderlayIPResource)
	var reasons map[string]string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if reasons, err = claimsInitialized(ctx, w); err != nil {
			return false, nil
		}
		for name, r := range reasons {
			if r == "" {
				return false, fmt.Errorf("NodeClaim %s is initialized", name)
			}
			if r != want {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("NodeClaims' initialization: %v; want each %q, have %v", err, want, reasons)
	}
	return reasons
}

// waitInitialized waits until Karpenter has initialized every NodeClaim.
func waitInitialized(ctx context.Context, t *testing.T, w *growthWatch) {
	t.Helper()
	var reasons map[string]string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if reasons, err = claimsInitialized(ctx, w); err != nil {
			return false, nil
		}
		for _, r := range reasons {
			if r != "" {
				return false, nil
			}
		}
		return len(reasons) > 0, nil
	})
	if err != nil {
		t.Fatalf("NodeClaims not all initialized: %v (%v)", err, reasons)
	}
}

// claimsInitialized is, per NodeClaim, "" when Karpenter has initialized
// it, else its Initialized condition's reason and message (or that it has
// none yet).
func claimsInitialized(ctx context.Context, w *growthWatch) (map[string]string, error) {
	list, err := w.dyn.Resource(nodeClaims).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range list.Items {
		out[c.GetName()] = "no Initialized condition"
		conds, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
		for _, x := range conds {
			m, _ := x.(map[string]any)
			switch {
			case m["type"] != "Initialized":
			case m["status"] == "True":
				out[c.GetName()] = ""
			default:
				out[c.GetName()] = fmt.Sprint(m["reason"], ": ", m["message"])
			}
		}
	}
	return out, nil
}
