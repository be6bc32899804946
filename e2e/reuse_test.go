//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// underlayPod is a bare pod asking for one underlay IP.
func underlayPod(ns, name, group string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"group": group}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/capscale/fake:1",
				Resources: corev1.ResourceRequirements{Limits: underlayRequest(1)}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// gracefulPod is p with the API's default grace: a delete of it is graceful,
// and its node (kwok, as the kubelet) makes it terminal before it goes.
func gracefulPod(p *corev1.Pod) *corev1.Pod {
	p.Spec.TerminationGracePeriodSeconds = nil
	return p
}

func createPods(ctx context.Context, t *testing.T, s *stack.Stack, pods ...*corev1.Pod) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 20)
	for _, p := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := s.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating pod %s: %v", p.Name, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// waitRejected waits until kube-scheduler has tried pod and found no room:
// its PodScheduled condition is False.
func waitRejected(ctx context.Context, t *testing.T, s *stack.Stack, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was bound to %s while every IP was taken", name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s never rejected: %v", name, err)
	}
}

// boundPods lists the bound pods of ns by name.
func boundPods(ctx context.Context, s *stack.Stack, ns string) ([]string, error) {
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	return out, nil
}

// waitBoundWithin polls until want pods of ns are bound, checking capacity at
// every poll, and fails when that takes longer than limit.
func waitBoundWithin(ctx context.Context, t *testing.T, s *stack.Stack, ns string, capacity map[string]int, want int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var bound int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		perNode, b, _, err := underlayUsage(ctx, s, ns)
		if err != nil {
			return false, nil
		}
		if over := overCapacity(perNode, capacity); over != "" {
			return false, fmt.Errorf("nodes over underlay-IP capacity: %s", over)
		}
		bound = b
		return bound == want, nil
	})
	if err != nil {
		t.Fatalf("want %d bound within %s, have %d: %v", want, limit, bound, err)
	}
	return time.Since(start)
}

// freedIPReuse is issue 19's scenario: two nodes of capacity 2, four bound
// pods and one waiting; 20 times over, delete a bound pod and expect the
// waiting one bound within 5 s, then put a new waiting pod back.
//
// The deletes are graceful and the pods end as the kubelet ends them
// (kwok's stages, e2e/tools/kwok/kubelet-delete.yaml): terminal, then gone.
// That is when an IP is free. A force-deleted pod's IP is held for 7 s
// (docs/failure-and-recovery.md "When is an IP free again"; TestRealNodeForceDelete).
func freedIPReuse(t *testing.T, s *stack.Stack) {
	ctx := testContext(t, 6*time.Minute)
	const ns = "reuse"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	capacity := map[string]int{plane.NodeName(0): 2, plane.NodeName(1): 2}
	var first []*corev1.Pod
	for i := range 4 {
		first = append(first, gracefulPod(underlayPod(ns, fmt.Sprintf("held-%d", i), "reuse")))
	}
	createPods(ctx, t, s, first...)
	waitBoundWithin(ctx, t, s, ns, capacity, 4, time.Minute)
	// A waiting pod deleted while pending, older than wait-0: the extender's
	// informer watches bound pods only, so the first freed IP is offered to
	// it, and must still reach wait-0 at once.
	createPods(ctx, t, s, underlayPod(ns, "gone", "reuse"))
	waitRejected(ctx, t, s, ns, "gone")
	createPods(ctx, t, s, gracefulPod(underlayPod(ns, "wait-0", "reuse")))
	waitRejected(ctx, t, s, ns, "wait-0")
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, "gone", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}

	var worst time.Duration
	for round := range 20 {
		bound, err := boundPods(ctx, s, ns)
		if err != nil || len(bound) != 4 {
			t.Fatalf("round %d: bound %v, %v; want 4", round, bound, err)
		}
		victim := bound[round%len(bound)]
		if err := s.Client.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		took := waitBoundWithin(ctx, t, s, ns, capacity, 4, 5*time.Second)
		worst = max(worst, took)
		next := fmt.Sprintf("wait-%d", round+1)
		createPods(ctx, t, s, gracefulPod(underlayPod(ns, next, "reuse")))
		waitRejected(ctx, t, s, ns, next)
	}
	t.Logf("20 freed IPs reused, slowest after %s", worst.Round(time.Millisecond))
}

// freedIPsAtScale: 200 pods wait on a full cluster; 20 IPs freed at once
// are all taken again within 10 s.
func freedIPsAtScale(t *testing.T, s *stack.Stack, capacity map[string]int) {
	ctx := testContext(t, 6*time.Minute)
	const ns = "reuse-scale"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range capacity {
		total += c
	}
	var held, waiting []*corev1.Pod
	for i := range total {
		held = append(held, underlayPod(ns, fmt.Sprintf("held-%03d", i), "held"))
	}
	createPods(ctx, t, s, held...)
	waitBoundWithin(ctx, t, s, ns, capacity, total, 2*time.Minute)
	for i := range 200 {
		waiting = append(waiting, underlayPod(ns, fmt.Sprintf("wait-%03d", i), "wait"))
	}
	createPods(ctx, t, s, waiting...)
	for _, p := range waiting {
		waitRejected(ctx, t, s, ns, p.Name)
	}
	bound, err := boundPods(ctx, s, ns)
	if err != nil || len(bound) != total {
		t.Fatalf("bound %d, %v; want %d", len(bound), err, total)
	}
	var wg sync.WaitGroup
	for _, name := range bound[:20] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Errorf("deleting %s: %v", name, err)
			}
		}()
	}
	wg.Wait()
	took := waitBoundWithin(ctx, t, s, ns, capacity, total, 10*time.Second)
	assertNeverOver(ctx, t, s, ns, capacity, 2*time.Second)
	t.Logf("20 IPs freed at once under 200 waiting pods: all reused after %s", took.Round(time.Millisecond))
}

func startReuseStack(t *testing.T, nodes int, capacity string, args ...string) *stack.Stack {
	t.Helper()
	return startStack(t, stack.Options{
		Plane: plane.Options{Nodes: nodes, Logf: t.Logf, Node: func(_ int, n *corev1.Node) {
			n.Annotations[names.UnderlayIPCapacityAnnotation] = capacity
		}},
		Extender:     true,
		ExtenderArgs: args,
	})
}

// freedIPReuseExtender is freedIPReuse in extender mode, then checks the
// requeuer's writes stayed within their bound (at most 4 per freed IP,
// triesPerFreedIP) and the waiting set came down to the Pending pods.
func freedIPReuseExtender(t *testing.T, s *stack.Stack) {
	t.Helper()
	ctx := testContext(t, time.Minute)
	writes := func() float64 {
		var sum float64
		for _, r := range []string{"requeued", "skipped", "gone", "error"} {
			sum += scrapeCounter(ctx, t, s, fmt.Sprintf(`capscale_extender_requeue_writes_total{result=%q}`, r))
		}
		return sum
	}
	freedIPReuse(t, s)
	after := writes()
	if after > 4*20 {
		t.Errorf("%v requeue writes for 20 freed IPs, want at most %d", after, 4*20)
	}
	// The deleted pending pod leaves the waiting set: through the pending
	// pods' watch, or a requeue write that found it gone, whichever comes
	// first. The set must come down to the pods still Pending.
	pending := func(ctx context.Context) float64 {
		l, err := s.Client.CoreV1().Pods("reuse").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
		if err != nil {
			return -1
		}
		return float64(len(l.Items))
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return scrapeCounter(ctx, t, s, "capscale_extender_waiting_pods") <= pending(ctx), nil
	}); err != nil {
		t.Errorf("waiting set holds %v pods, %v Pending", scrapeCounter(ctx, t, s, "capscale_extender_waiting_pods"), pending(ctx))
	}
	if n := scrapeCounter(ctx, t, s, "capscale_extender_freed_ip_reuse_seconds_count"); n < 20 {
		t.Errorf("freed_ip_reuse_seconds observed %v reuses, want at least 20", n)
	}
	// The extender binary runs on one P by default (--max-procs).
	if n := scrapeCounter(ctx, t, s, "go_sched_gomaxprocs_threads"); n != 1 {
		t.Errorf("extender GOMAXPROCS = %v, want the --max-procs default 1", n)
	}
	t.Logf("requeue writes: %v for 20 freed IPs", after)
}

// TestFreedIPsAtScaleExtender: 10 nodes of 4 IPs, 200 waiting, 20 freed.
func TestFreedIPsAtScaleExtender(t *testing.T) {
	s := startReuseStack(t, 10, "4")
	capacity := map[string]int{}
	for i := range 10 {
		capacity[plane.NodeName(i)] = 4
	}
	ctx := testContext(t, time.Minute)
	before := scrapeCounter(ctx, t, s, `capscale_extender_requeue_writes_total{result="requeued"}`)
	freedIPsAtScale(t, s, capacity)
	writes := scrapeCounter(ctx, t, s, `capscale_extender_requeue_writes_total{result="requeued"}`) - before
	if writes > 4*20 {
		t.Errorf("%v requeue writes for 20 freed IPs under 200 waiting pods, want at most 80", writes)
	}
	t.Logf("requeue writes: %v for 20 freed IPs under 200 waiting pods", writes)
}

// startNativeReuseStack is a plane in native mode: the extender binary
// publishes every node's annotated capacity into status.capacity and
// allocatable, and kube-scheduler (deploy/native's configuration, no
// extender) counts the resource itself.
func startNativeReuseStack(t *testing.T, nodes int, capacity string) *stack.Stack {
	t.Helper()
	s := startStack(t, stack.Options{
		Plane: plane.Options{Nodes: nodes, Logf: t.Logf, Node: func(_ int, n *corev1.Node) {
			n.Annotations[names.UnderlayIPCapacityAnnotation] = capacity
		}},
		Native: true,
	})
	ctx := testContext(t, 3*time.Minute)
	want := map[string]int64{}
	c, _ := strconv.ParseInt(capacity, 10, 64)
	for i := range nodes {
		want[plane.NodeName(i)] = c
	}
	waitAllocatable(ctx, t, s, want, time.Minute)
	return s
}

// waitAllocatable waits until every named node advertises want of the
// underlay resource in both capacity and allocatable.
func waitAllocatable(ctx context.Context, t *testing.T, s *stack.Stack, want map[string]int64, limit time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		for name, w := range want {
			n, err := s.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			c, a := n.Status.Capacity[names.UnderlayIPResource], n.Status.Allocatable[names.UnderlayIPResource]
			if c.Value() != w || a.Value() != w {
				last = fmt.Sprintf("%s: capacity %s allocatable %s, want %d", name, c.String(), a.String(), w)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("capacity not published within %s: %s", limit, last)
	}
}

// TestFreedIPsAtScaleNative: 200 waiting, 20 freed, native mode.
func TestFreedIPsAtScaleNative(t *testing.T) {
	s := startNativeReuseStack(t, 10, "4")
	capacity := map[string]int{}
	for i := range 10 {
		capacity[plane.NodeName(i)] = 4
	}
	freedIPsAtScale(t, s, capacity)
}
