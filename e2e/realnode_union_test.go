//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/e2e/plane"
)

// TestRealNodeWhereaboutsUnion is issue 55 §3 on a real node whose IPs
// whereabouts hands out (its /29 slice: 6), in each mode. Five pods run;
// one is force-deleted, and its container keeps running past SIGTERM
// (TERM_DELAY), so the kubelet's CNI DEL comes only after its 2 s kill:
// whereabouts' IPPool still lists its IP. Two pods are created at once
// into the one IP really free. The first is bound before its CNI ADD, so
// the IPPool cannot list it yet; the second must wait for the force-deleted
// pod's IP. Counting the larger of the pods (5) and the IPPool (5) bound
// both, and one sandbox failed with whereabouts' "Could not allocate IP";
// counting their union binds one, then the other once the IP is back. No
// sandbox fails, and all six run in the end.
func TestRealNodeWhereaboutsUnion(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		o := m.stack(plane.Options{IPAM: plane.IPAMWhereabouts})
		o.CapacitySources = whereaboutsSource
		// Native mode holds a force-deleted pod with its release finalizer
		// until the kubelet has finished it, as the chart installs it on
		// 1.36+: without it, kube-scheduler sees the IP free before the
		// publisher can withhold it (docs/operations.md).
		o.ReleaseFinalizer = true
		s := startRealNodeStack(t, o, 1)
		ctx := testContext(t, 4*time.Minute)
		checkSliceMirrored(ctx, t, s)
		n0 := s.RealNodes[0].Name
		if s.Opts.Native {
			waitAllocatable(ctx, t, s, map[string]int64{n0: whereaboutsSlice}, time.Minute)
		}
		const ns = "wb-union"
		if err := s.WaitForNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		pod := func(name string) *corev1.Pod {
			p := realPod(ns, name, 1)
			// Keeps serving after SIGTERM: the kubelet's kill takes its
			// 2 s minimum before the sandbox (and its IP) goes.
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TERM_DELAY", Value: "60s"}}
			return p
		}
		var first []*corev1.Pod
		for i := range whereaboutsSlice - 1 {
			first = append(first, pod(fmt.Sprintf("p-%02d", i)))
		}
		createPods(ctx, t, s, first...)
		st := waitRealState(ctx, t, s, ns, 2*time.Minute, fmt.Sprintf("%d Running", whereaboutsSlice-1), func(st realState) bool {
			return len(st.running[n0]) == whereaboutsSlice-1 && len(st.creating) == 0 && len(st.pending) == 0
		})
		// The mirror has counted them: the IPPool's report is current.
		waitUsed(ctx, t, s, n0, fmt.Sprint(whereaboutsSlice-1), whereaboutsSlice)
		watch := watchIPAM(ctx, t, s, s.RealNodes)

		victim := slices.Sorted(maps.Keys(st.running[n0]))[0]
		if err := s.Client.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		createPods(ctx, t, s, pod("b"), pod("c"))
		waitRealState(ctx, t, s, ns, 2*time.Minute, fmt.Sprintf("b and c Running in %s's place", victim), func(st realState) bool {
			_, still := st.running[n0][victim]
			_, b := st.running[n0]["b"]
			_, c := st.running[n0]["c"]
			return !still && b && c && len(st.running[n0]) == whereaboutsSlice && len(st.creating) == 0 && len(st.pending) == 0
		})
		checkIPAMNeverOver(ctx, t, s, ns, watch, whereaboutsSlice)
	})
}
