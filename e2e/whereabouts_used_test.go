//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// sandboxHeld on a pod keeps kwok from stopping it when it is deleted.
const sandboxHeld = "capscale.io/e2e-sandbox-held"

// whereaboutsUsedSlice is the usable IPs of the kwok node's whereabouts
// slice in TestWhereaboutsUsed: a /30.
const whereaboutsUsedSlice = 2

// TestWhereaboutsUsed: with whereabouts as the IPAM (the
// whereabouts-node-slice preset), a node stays charged for the IP of a
// force-deleted pod for as long as whereabouts' IPPool lists it — past the
// 7 s the rule holds it when no IPAM reports use — and the pod waiting for
// it is bound once whereabouts has it back. whereabouts' own code writes
// everything capscale reads: its node-slice controller the NodeSlicePool,
// its CNI plugin (ADD for each pod bound, DEL when the test lets the
// force-deleted pod's sandbox go, as its kubelet would) the IPPool.
func TestWhereaboutsUsed(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		o := m.stack(plane.Options{Nodes: 1, Logf: t.Logf})
		// Native mode holds a force-deleted pod with its release
		// finalizer until the kubelet (here the test) writes the
		// terminal phase, as the chart installs it.
		o.ReleaseFinalizer = true
		o.CapacitySources = "sources:\n- name: whereabouts\n  preset: whereabouts-node-slice\n  nodeSelector: {}\n"
		o.Prepare = func(ctx context.Context, s *stack.Stack) error {
			_, _, err := s.StartWhereaboutsSlices(ctx, whereaboutsUsedSlice)
			return err
		}
		s := startStack(t, o)
		ctx := testContext(t, 2*time.Minute)
		n0 := plane.NodeName(0)
		// No pod yet, so no IPPool: whereabouts holds nothing there.
		waitUsed(ctx, t, s, n0, "0", whereaboutsUsedSlice)

		const ns = "wb-used"
		if err := s.WaitForNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		capacity := map[string]int{n0: whereaboutsUsedSlice}
		// kwok does not stop p-0 when it is deleted
		// (e2e/tools/kwok/kubelet-delete.yaml): the test is its kubelet,
		// whose sandbox teardown is still under way.
		held := underlayPod(ns, "p-0", "p")
		held.Annotations = map[string]string{sandboxHeld: "true"}
		createPods(ctx, t, s, held, underlayPod(ns, "p-1", "p"))
		waitBoundWithin(ctx, t, s, ns, capacity, 2, 30*time.Second)
		cni := func(command, pod string) {
			t.Helper()
			if _, err := s.WhereaboutsCNI(ctx, command, n0, ns, pod, "sandbox-"+pod); err != nil {
				t.Fatal(err)
			}
		}
		cni("ADD", "p-0")
		cni("ADD", "p-1")
		waitUsed(ctx, t, s, n0, "2", whereaboutsUsedSlice)
		createPods(ctx, t, s, underlayPod(ns, "p-2", "p"))
		waitRejected(ctx, t, s, ns, "p-2")

		// p-0 force-deleted: gone from the API (in native mode Terminating,
		// held by the release finalizer until its kubelet writes the
		// terminal phase), its sandbox (and its IP in the IPPool) not yet
		// torn down. The node stays full past the rule's 7 s hold:
		// whereabouts still lists the IP.
		if err := s.Client.CoreV1().Pods(ns).Delete(ctx, "p-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		stayBoundPending(ctx, t, s, ns, 1, 1, 10*time.Second)

		// The sandbox torn down: whereabouts has the IP back, then the
		// kubelet writes the terminal phase (native mode's finalizer
		// goes), and p-2 is bound.
		cni("DEL", "p-0")
		released := time.Now()
		endPod(ctx, t, s, ns, "p-0")
		took := waitBoundWithin(ctx, t, s, ns, capacity, 2, 5*time.Second)
		t.Logf("%s mode: the node stayed full %s after the force delete, until whereabouts released the IP; then the waiting pod was bound in %s",
			m.name, released.Sub(deleted).Round(100*time.Millisecond), took.Round(time.Millisecond))
	})
}

// endPod writes the terminal phase of a deleted pod as its kubelet does
// once its sandbox is stopped, if it is still in the API (native mode's
// finalizer keeps it); kwok then deletes it.
func endPod(ctx context.Context, t *testing.T, s *stack.Stack, ns, name string) {
	t.Helper()
	p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodFailed
	if _, err := s.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
