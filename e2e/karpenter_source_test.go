//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// karpenterSliceIPs is the usable IPs of each whereabouts slice in
// TestKarpenterCapacitySource: a /29.
const karpenterSliceIPs = plane.DefaultWhereaboutsCapacity

// TestKarpenterCapacitySource: the burst of TestKarpenterNative with every
// node's capacity from a capacity source that the IPAM's own code writes.
// whereabouts v0.9.2's node-slice controller runs against the plane (it
// needs only the API) and gives every Node a /29 of its NodeSlicePool as
// it joins, Karpenter's new nodes too; capscale-controller's mirror reads
// the slice (the whereabouts-node-slice preset), the publisher publishes
// it and removes the startup taint. The NodePool carries no capacity
// label, the NodeOverlay says the slice's 6. whereabouts' controller is
// paused while the new nodes join, so that they wait seconds for a slice.
// At every poll a node may hold only what its slice gives once capscale
// has read it, nothing before: no pod lands on a new node before its
// slice is read (--await-capacity-source, and a source without a
// nodeSelector covering the nodes it names no slice of yet; without either
// the publisher publishes --default-capacity on a node not sliced yet and
// lifts its taint, and the test fails).
func TestKarpenterCapacitySource(t *testing.T) {
	ctx, w, slicer := startKarpenterSliced(t, stack.Options{Native: true}, `[{"op":"remove","path":"/spec/template/metadata/labels/capscale.io~1underlay-ip-capacity"}]`)

	// 26 pods of one IP on the plane's 12: 14 Pending → 3 nodes of 6.
	// whereabouts is slow to slice: its controller is paused until the
	// new nodes have joined, and for slicerHeld more. Meanwhile they have
	// no slice: they must keep the startup taint and no pod.
	const replicas = 26
	pending := replicas - karpenterStaticNodes*karpenterSliceIPs
	want := minNodes(pending, karpenterSliceIPs)
	resumed := pauseUntilLaunched(ctx, t, w, slicer, want)
	g := w.grow(ctx, t, "slices", replicas, podNeeds(1, "100m"), "Insufficient "+names.UnderlayIPResource)
	if g.launched != want {
		t.Errorf("slices of %d: %d nodes launched, the IPs need %d", karpenterSliceIPs, g.launched, want)
	}
	sliced := resumed()
	removed := taintRemovals(t, w.s)
	for _, n := range w.launchedNodes(ctx, t) {
		q := n.Status.Allocatable[underlay.Resource]
		src := n.Annotations[names.UnderlayIPSourceAnnotation]
		if q.Value() != karpenterSliceIPs || !strings.HasPrefix(src, "whereabouts nodeslicepools.whereabouts.cni.cncf.io/") {
			t.Errorf("node %s publishes %s=%s from %q, want its slice's %d from whereabouts' NodeSlicePool", n.Name, names.UnderlayIPResource, q.String(), src, karpenterSliceIPs)
		}
		if !removed[n.Name] {
			t.Errorf("node %s: no taint removal by the publisher in the audit log", n.Name)
		}
	}
	t.Logf("karpenter-growth mode=native source=whereabouts-node-slice launched=%d minimum=%d pending-to-bound=%.1fs sliced-to-bound=%.1fs",
		g.launched, want, g.took.Seconds(), g.bound.Sub(sliced).Seconds())
}

// slicedSource is the capacity source of the Karpenter tests on
// whereabouts' node slices, as the chart's default source is written: no
// nodeSelector. Such a source covers every node that no other source
// covers, so a node whereabouts has not sliced yet counts 0 until it has a
// slice, never the label or the default (docs/capacity-sources.md "A node that
// joins before its IPAM object").
const slicedSource = "sources:\n- name: whereabouts\n  preset: whereabouts-node-slice\n"

// startKarpenterSliced is startKarpenterStack in o's mode with every
// node's capacity from whereabouts' slices of karpenterSliceIPs (the
// NodeOverlay says as much), watched by sliceCapacity, once the mirror has
// read the plane's own nodes' slices. It returns whereabouts' node-slice
// controller, for pauseUntilLaunched.
func startKarpenterSliced(t *testing.T, o stack.Options, nodePoolPatch string) (context.Context, *growthWatch, *plane.Process) {
	t.Helper()
	var pool string
	var slicer *plane.Process
	o.CapacitySources = slicedSource
	o.Prepare = func(ctx context.Context, s *stack.Stack) (err error) {
		pool, slicer, err = s.StartWhereaboutsSlices(ctx, karpenterSliceIPs)
		return err
	}
	ctx, w := startKarpenterStack(t, o, nodePoolPatch)
	if out, err := w.s.Kubectl(ctx, "patch", "nodeoverlay", "capscale-underlay-ip-c-4x-amd64-linux", "--type=merge",
		"-p", fmt.Sprintf(`{"spec":{"capacity":{%q:"%d"}}}`, names.UnderlayIPResource, karpenterSliceIPs)); err != nil {
		t.Fatalf("patching the NodeOverlay: %v\n%s", err, out)
	}
	w.limit = 2 * time.Minute
	w.capacity = sliceCapacity(w.dyn, pool, karpenterSliceIPs)
	for i := range karpenterStaticNodes {
		waitMirrored(ctx, t, w.s, plane.NodeName(i), is(karpenterSliceIPs), karpenterSliceIPs)
	}
	return ctx, w, slicer
}

// slicerHeld is how long whereabouts' controller stays paused once the
// launched nodes have joined.
const slicerHeld = 3 * time.Second

// pauseUntilLaunched stops slicer's process now and resumes it slicerHeld
// after want nodes of Karpenter's have joined (or when the test ends). The
// returned func waits for the resumption and says when it was.
func pauseUntilLaunched(ctx context.Context, t *testing.T, w *growthWatch, slicer *plane.Process, want int) func() time.Time {
	t.Helper()
	resume := pauseProcess(t, slicer)
	done := make(chan time.Time, 1)
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			nodes, err := w.s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodepool"})
			return err == nil && len(nodes.Items) >= want, nil
		})
		select {
		case <-ctx.Done():
		case <-time.After(slicerHeld):
		}
		resume()
		done <- time.Now()
	}()
	return sync.OnceValue(func() time.Time { return <-done })
}

// sliceCapacity is what each node may hold under whereabouts' slices: the
// usable IPs of the slice NodeSlicePool pool gives it, once capscale's
// mirror has read that slice onto the Node; 0 before (not read yet, or read
// as invalid while the node had no slice). A mirrored figure other than the
// slice's is an error.
func sliceCapacity(dyn dynamic.Interface, pool string, usable int) func(context.Context, []corev1.Node) (map[string]int, error) {
	return func(ctx context.Context, nodes []corev1.Node) (map[string]int, error) {
		u, err := dyn.Resource(plane.NodeSlicePoolsResource).Namespace(plane.WhereaboutsNamespace).Get(ctx, pool, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		allocs, _, err := unstructured.NestedSlice(u.Object, "status", "allocations")
		if err != nil {
			return nil, fmt.Errorf("NodeSlicePool %s: %w", pool, err)
		}
		sliced := map[string]bool{}
		for _, a := range allocs {
			if m, ok := a.(map[string]any); ok {
				n, _ := m["nodeName"].(string)
				sliced[n] = n != ""
			}
		}
		out := map[string]int{}
		for _, n := range nodes {
			got, read := n.Annotations[names.UnderlayIPSourceCapacityAnnotation]
			switch {
			case !read || strings.HasPrefix(got, "invalid"):
				out[n.Name] = 0
			case got != strconv.Itoa(usable) || !sliced[n.Name]:
				return nil, fmt.Errorf("node %s: capscale mirrored %q; whereabouts gives it a slice: %v, of %d usable IPs", n.Name, got, sliced[n.Name], usable)
			default:
				out[n.Name] = usable
			}
		}
		return out, nil
	}
}
