//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// holdFinalizer keeps a preemption victim Terminating, so that the pod it
// was evicted for stays nominated and unbound for as long as the test wants.
const holdFinalizer = "capscale.io/e2e-hold"

// TestPluginNomineeExit: a pod nominated to a node by preemption is deleted
// before it binds, and a pod that UnderlayIP rejected there only because
// the nominee's IPs were counted is bound within 5 s (issue 41, fault 1).
//
// One node of 2 IPs. The victim (priority 100, 2 IPs) holds them and a
// finalizer keeps it Terminating once evicted. The nominee (priority 1000,
// 2 IPs) preempts it and is nominated to the node; the capacity is raised to
// 3, which still cannot take victim and nominee. The waiter (priority 100,
// 1 IP) fits beside the victim but not beside the nominee as well: Filter
// adds nominated pods of higher or equal priority, so it is rejected by
// UnderlayIP alone, with "4/3 used" (victim and nominee). The nominee is
// deleted:
// kube-scheduler sends AssignedPod/Delete for it, and the plugin's hint must
// requeue the waiter; without it the waiter sits out the 5-minute flush.
func TestPluginNomineeExit(t *testing.T) {
	s := startPluginStack(t, 1, func(int) string { return "2" })
	ctx := testContext(t, 3*time.Minute)
	const ns = "nominee"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	node := plane.NodeName(0)
	for name, v := range map[string]int32{"low": 100, "high": 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}, Value: v}
		if _, err := s.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name, priority string, ips int64) *corev1.Pod {
		p := underlayPod(ns, name, name)
		p.Spec.PriorityClassName = ns + "-" + priority
		p.Spec.Containers[0].Resources.Limits = underlayRequest(ips)
		return p
	}

	victim := pod("victim", "low", 2)
	victim.Finalizers = []string{holdFinalizer}
	t.Cleanup(func() { releaseFinalizer(s, ns, victim.Name) })
	createPods(ctx, t, s, victim)
	if got := waitNodeName(ctx, t, s, ns, victim.Name); got != node {
		t.Fatalf("victim bound to %s, want %s", got, node)
	}

	createPods(ctx, t, s, pod("nominee", "high", 2))
	waitPod(ctx, t, s, ns, "nominee", "nominated to "+node+" and unbound, the victim Terminating", func(p *corev1.Pod) bool {
		v, err := s.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		return p.Status.NominatedNodeName == node && p.Spec.NodeName == "" && err == nil && v.DeletionTimestamp != nil
	})

	setCapacity(ctx, t, s, node, "3")
	createPods(ctx, t, s, pod("waiter", "low", 1))
	waitRejected(ctx, t, s, ns, "waiter")
	waitPendingMessage(ctx, t, s, ns, "underlay IPs exhausted: 4/3 used, pod needs 1")
	if p, err := s.Client.CoreV1().Pods(ns).Get(ctx, "nominee", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" || p.Status.NominatedNodeName != node {
		t.Fatalf("before the delete the nominee must still be nominated to %s and unbound: %+v, %v", node, p.Status, err)
	}

	deleted := time.Now()
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, "nominee", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitPodWithin(ctx, t, s, ns, "waiter", "bound to "+node, 5*time.Second, func(p *corev1.Pod) bool { return p.Spec.NodeName == node })
	t.Logf("the waiter was bound %s after the nominee's delete", time.Since(deleted).Round(time.Millisecond))
}

// waitPod waits up to a minute until pod ns/name satisfies ok.
func waitPod(ctx context.Context, t *testing.T, s *stack.Stack, ns, name, what string, ok func(*corev1.Pod) bool) {
	t.Helper()
	waitPodWithin(ctx, t, s, ns, name, what, time.Minute, ok)
}

// waitPodWithin waits up to limit until pod ns/name satisfies ok.
func waitPodWithin(ctx context.Context, t *testing.T, s *stack.Stack, ns, name, what string, limit time.Duration, ok func(*corev1.Pod) bool) {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return ok(p), nil
	})
	if err != nil {
		state := "not found"
		if last != nil {
			state = fmt.Sprintf("node %q, nominated %q, conditions %+v", last.Spec.NodeName, last.Status.NominatedNodeName, last.Status.Conditions)
		}
		t.Fatalf("pod %s/%s not %s within %s: %s", ns, name, what, limit, state)
	}
}

// releaseFinalizer lets a pod held by holdFinalizer go.
func releaseFinalizer(s *stack.Stack, ns, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	_, _ = s.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
}
