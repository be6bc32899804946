//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// whereaboutsExhausted is what whereabouts v0.9.2 says when a node's slice
// has no address left (pkg/allocate/allocate.go AssignmentError).
const whereaboutsExhausted = "Could not allocate IP in range"

// whereaboutsSlice is the usable IPs of each real node's slice here: a /29.
const whereaboutsSlice = plane.DefaultWhereaboutsCapacity

// whereaboutsSource is capscale-controller's capacity source on
// whereabouts' NodeSlicePool, for the real nodes.
const whereaboutsSource = `sources:
- name: whereabouts
  preset: whereabouts-node-slice
  nodeSelector: {matchLabels: {"` + plane.RealNodeLabel + `": "true"}}
`

// TestRealNodeWhereabouts: real nodes whose IPs whereabouts hands out, each
// from the slice its node-slice controller gave the node (a /29: 6 IPs).
// Without capscale, pods beyond the slice wait in ContainerCreating with
// whereabouts' own "Could not allocate IP in range". With capscale reading
// whereabouts' NodeSlicePool (the whereabouts-node-slice preset), in each
// mode, the mirrored capacity is the slice's 6, the pods beyond both
// slices stay Pending with capscale's reason, every Running pod has an IP
// of its node's slice that whereabouts' IPPool records; a force-deleted
// pod's replacement runs once whereabouts has its IP back; and no sandbox
// fails.
func TestRealNodeWhereabouts(t *testing.T) {
	t.Run("no-capscale", func(t *testing.T) {
		s := startRealNodeStack(t, stack.Options{Plane: plane.Options{IPAM: plane.IPAMWhereabouts}}, 1)
		ctx := testContext(t, 4*time.Minute)
		const ns = "wb-exhausted"
		if err := s.WaitForNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		var pods []*corev1.Pod
		for i := range whereaboutsSlice + 2 {
			pods = append(pods, realPod(ns, fmt.Sprintf("p-%02d", i), 0))
		}
		createPods(ctx, t, s, pods...)
		st := waitIPAMStuck(ctx, t, s, ns, 3*time.Minute, whereaboutsSlice, 2, whereaboutsExhausted)
		checkRunningIPs(t, s.RealNodes, st)
		failed, err := sandboxFailures(ctx, s, ns, whereaboutsExhausted)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("whereabouts' own words, in the stuck pods' events: %s", failed[0])
	})

	forEachMode(t, func(t *testing.T, m schedulingMode) {
		o := m.stack(plane.Options{IPAM: plane.IPAMWhereabouts})
		o.CapacitySources = whereaboutsSource
		s := startRealNodeStack(t, o, 2)
		ctx := testContext(t, 5*time.Minute)
		checkSliceMirrored(ctx, t, s)
		if s.Opts.Native {
			waitAllocatable(ctx, t, s, map[string]int64{plane.RealNodeName(0): whereaboutsSlice, plane.RealNodeName(1): whereaboutsSlice}, time.Minute)
		}
		const ns = "wb-prevented"
		if err := s.WaitForNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		watch := watchIPAM(ctx, t, s, s.RealNodes)
		var pods []*corev1.Pod
		for i := range 2*whereaboutsSlice + 3 {
			pods = append(pods, realPod(ns, fmt.Sprintf("p-%02d", i), 1))
		}
		createPods(ctx, t, s, pods...)
		st := waitRealState(ctx, t, s, ns, 3*time.Minute, "12 Running, 3 Pending", func(st realState) bool {
			return st.runningCount() == 2*whereaboutsSlice && len(st.creating) == 0 && len(st.pending) == 3
		})
		for _, n := range s.RealNodes {
			if got := len(st.running[n.Name]); got != whereaboutsSlice {
				t.Errorf("%s runs %d pods, want %d (%s)", n.Name, got, whereaboutsSlice, st)
			}
		}
		checkRunningIPs(t, s.RealNodes, st)
		reason := "Insufficient " + names.UnderlayIPResource
		if !s.Opts.Native {
			reason = fmt.Sprintf("underlay IPs exhausted: %d/%d used, pod needs 1", whereaboutsSlice, whereaboutsSlice)
		}
		checkPendingReason(ctx, t, s, ns, st.pending, reason)
		replaceForceDeleted(ctx, t, s, ns, st)
		checkIPAMNeverOver(ctx, t, s, ns, watch, whereaboutsSlice)
	})
}

// replaceForceDeleted force-deletes one of node 0's Running pods (issue 49
// §5) and waits until a Pending pod runs in its place. whereabouts' IPPool
// keeps the IP charged to the node until the kubelet's CNI DEL gives it
// back (the preset's usedFrom), so the replacement meets no IPAM failure:
// the caller's sandboxFailures and watchIPAM see every sandbox.
func replaceForceDeleted(ctx context.Context, t *testing.T, s *stack.Stack, ns string, st realState) {
	t.Helper()
	n0 := s.RealNodes[0].Name
	victims := slices.Sorted(maps.Keys(st.running[n0]))
	if len(victims) == 0 {
		t.Fatalf("no Running pod on %s: %s", n0, st)
	}
	start := time.Now()
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, victims[0], metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitRealState(ctx, t, s, ns, 2*time.Minute, "a Pending pod Running in "+victims[0]+"'s place", func(st realState) bool {
		_, still := st.running[n0][victims[0]]
		return !still && len(st.running[n0]) == whereaboutsSlice && len(st.pending) == 2 && len(st.creating) == 0
	})
	t.Logf("%s force-deleted on %s: a Pending pod Running in its place %s later", victims[0], n0, time.Since(start).Round(100*time.Millisecond))
}

// checkSliceMirrored waits until capscale-controller has mirrored each real
// node's capacity from whereabouts' NodeSlicePool, and checks it is the
// usable IPs of the slice whereabouts gave the node.
func checkSliceMirrored(ctx context.Context, t *testing.T, s *stack.Stack) {
	t.Helper()
	for _, n := range s.RealNodes {
		usable := 0
		for a := n.RangeStart; a.Compare(n.RangeEnd) <= 0; a = a.Next() {
			usable++
		}
		if usable != whereaboutsSlice || n.Slice.Bits() != 29 {
			t.Errorf("%s has the slice %s (%s-%s, %d usable), want a /29 of %d", n.Name, n.Slice, n.RangeStart, n.RangeEnd, usable, whereaboutsSlice)
		}
		var got, origin string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			node, err := s.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got, origin = node.Annotations[names.UnderlayIPSourceCapacityAnnotation], node.Annotations[names.UnderlayIPSourceAnnotation]
			return got != "", nil
		})
		if err != nil || got != strconv.Itoa(usable) {
			t.Fatalf("%s: mirrored capacity %q (from %q), %v; want %d, its slice %s's usable IPs", n.Name, got, origin, err, usable, n.Slice)
		}
		t.Logf("%s: slice %s, mirrored capacity %s from %s", n.Name, n.Slice, got, origin)
	}
}
