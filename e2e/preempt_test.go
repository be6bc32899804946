//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// preemptionSetup fills two nodes of 2 IPs with low-priority underlay pods
// and creates one high-priority underlay pod.
func preemptionSetup(ctx context.Context, t *testing.T, s *stack.Stack, ns string) map[string]int {
	t.Helper()
	capacity := map[string]int{plane.NodeName(0): 2, plane.NodeName(1): 2}
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]int32{"low": 100, "high": 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}, Value: v}
		if _, err := s.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var low []*corev1.Pod
	for i := range 4 {
		p := underlayPod(ns, fmt.Sprintf("low-%d", i), "low")
		p.Spec.PriorityClassName = ns + "-low"
		low = append(low, p)
	}
	createPods(ctx, t, s, low...)
	waitBoundWithin(ctx, t, s, ns, capacity, 4, time.Minute)
	high := underlayPod(ns, "high", "high")
	high.Spec.PriorityClassName = ns + "-high"
	createPods(ctx, t, s, high)
	return capacity
}

// preemptionTakesIP runs preemptionSetup and expects kube-scheduler's own
// preemption to evict one low-priority pod for the high-priority one, no
// node over capacity at any poll.
func preemptionTakesIP(ctx context.Context, t *testing.T, s *stack.Stack, ns string) {
	t.Helper()
	capacity := preemptionSetup(ctx, t, s, ns)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		perNode, _, _, err := underlayUsage(ctx, s, ns)
		if err != nil {
			return false, nil
		}
		if over := overCapacity(perNode, capacity); over != "" {
			return false, fmt.Errorf("nodes over underlay-IP capacity: %s", over)
		}
		p, err := s.Client.CoreV1().Pods(ns).Get(ctx, "high", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("the high-priority pod was not placed by preemption: %v", err)
	}
	if _, bound, _, _ := underlayUsage(ctx, s, ns); bound != 4 {
		t.Errorf("%d pods bound after preemption, want 4 (3 low and the high one)", bound)
	}
	assertNeverOver(ctx, t, s, ns, capacity, 2*time.Second)
}

// preemptionRefused runs preemptionSetup in extender mode, where
// kube-scheduler's preemption dry run runs only in-tree filters, which
// ignore the IPs, finds no victim, and never calls /preempt: the
// high-priority pod stays Pending (docs/failure-and-recovery.md).
func preemptionRefused(ctx context.Context, t *testing.T, s *stack.Stack, ns string) {
	t.Helper()
	preemptionSetup(ctx, t, s, ns)
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=high,reason=FailedScheduling"})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			last = e.Message
			if strings.Contains(e.Message, "underlay IPs exhausted") && strings.Contains(e.Message, "preemption:") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event with the extender's reason and a preemption verdict; last: %q", last)
	}
	time.Sleep(10 * time.Second)
	p, err := s.Client.CoreV1().Pods(ns).Get(ctx, "high", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || p.Status.NominatedNodeName != "" {
		t.Errorf("high-priority pod bound to %q, nominated %q: extender-mode preemption now works, update docs/failure-and-recovery.md and docs/design/extender-preemption.md", p.Spec.NodeName, p.Status.NominatedNodeName)
	}
	if n := scrapeCounter(ctx, t, s, `capscale_extender_http_requests_total{code="200",route="preempt"}`); n != 0 {
		t.Errorf("/preempt was called %v times", n)
	}
	if _, bound, _, _ := underlayUsage(ctx, s, ns); bound != 4 {
		t.Errorf("%d pods bound, want the 4 low-priority ones untouched", bound)
	}
	t.Logf("as documented: %s", last)
}
