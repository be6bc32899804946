//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// Plugin mode: the plane's scheduler is capscale-scheduler (kube-scheduler
// with the UnderlayIP plugin, deploy/plugin/kube-scheduler-config.yaml), and
// no capscale process runs beside it.

// startPluginStack is a plugin-mode plane of nodes nodes, node i annotated
// with annotation(i) ("" for none).
func startPluginStack(t *testing.T, nodes int, annotation func(i int) string) *stack.Stack {
	t.Helper()
	return startStack(t, stack.Options{
		Plane: plane.Options{Nodes: nodes, Logf: t.Logf, Node: func(i int, n *corev1.Node) {
			if a := annotation(i); a != "" {
				n.Annotations[names.UnderlayIPCapacityAnnotation] = a
			}
		}},
		Plugin: true,
	})
}

// TestMostFreeByCount: one node of 10 IPs with 6 used, one of 3 with 1 used.
// Plugin mode ranks by count: the next pod goes to the node with 4 free.
// Native mode ranks by the fraction left free once the pod is placed
// (LeastAllocated counts the incoming pod): 1 of 3 beats 3 of 10, so it
// picks the node with 2 free. The test shows both. (With 5 free of 10
// against 2 of 3 both modes pick the larger node: 4 of 10 left beats 1 of 3.)
func TestMostFreeByCount(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want int
	}{
		{mode: "plugin", want: 0},
		{mode: "native", want: 1},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			annotation := func(i int) string { return []string{"10", "3"}[i] }
			var s *stack.Stack
			if tc.mode == "plugin" {
				s = startPluginStack(t, 2, annotation)
			} else {
				s = startStack(t, stack.Options{Plane: plane.Options{Nodes: 2, Logf: t.Logf, Node: func(i int, n *corev1.Node) {
					n.Annotations[names.UnderlayIPCapacityAnnotation] = annotation(i)
				}}, Native: true})
				waitAllocatable(testContext(t, time.Minute), t, s, map[string]int64{plane.NodeName(0): 10, plane.NodeName(1): 3}, time.Minute)
			}
			ctx := testContext(t, 3*time.Minute)
			const ns = "count"
			if err := s.WaitForNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			// The holders are placed by name: the rankings under test play no part.
			var held []*corev1.Pod
			for i := range 7 {
				p := underlayPod(ns, fmt.Sprintf("held-%d", i), "held")
				p.Spec.NodeName = plane.NodeName(min(i/6, 1))
				held = append(held, p)
			}
			createPods(ctx, t, s, held...)
			capacity := map[string]int{plane.NodeName(0): 10, plane.NodeName(1): 3}
			waitBoundWithin(ctx, t, s, ns, capacity, 7, time.Minute)
			p := underlayPod(ns, "next", "next")
			createPods(ctx, t, s, p)
			if got, want := waitNodeName(ctx, t, s, ns, p.Name), plane.NodeName(tc.want); got != want {
				t.Errorf("%s mode placed the pod on %s, want %s (4 free of 10 against 2 free of 3)", tc.mode, got, want)
			}
		})
	}
}

// TestPluginCapacityChange: a node's capacity annotation changes while pods
// wait. The plugin keeps each Node object's capacity reading and reads an
// update, a new object, at once (schedplugin/capacity.go); its queueing hint
// retries a waiting pod when a node's capacity grows. One node of 2 IPs and
// 3 pods: 2 bound, 1 waits. Raised to 3: the waiting pod binds within 5 s,
// with no write by anyone but the test. Lowered to 1: nothing bound is
// evicted, and a new pod waits, its event naming 3/1 used. Raised to 4: it
// binds within 5 s.
func TestPluginCapacityChange(t *testing.T) {
	s := startPluginStack(t, 1, func(int) string { return "2" })
	ctx := testContext(t, 4*time.Minute)
	const ns = "capchange"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	node := plane.NodeName(0)
	createPods(ctx, t, s, underlayPod(ns, "p-0", "p"), underlayPod(ns, "p-1", "p"), underlayPod(ns, "p-2", "p"))
	waitUnderlay(ctx, t, s, ns, map[string]int{node: 2}, 2, 1)
	waitRejected(ctx, t, s, ns, pendingPod(ctx, t, s, ns))

	setCapacity(ctx, t, s, node, "3")
	waitBoundWithin(ctx, t, s, ns, map[string]int{node: 3}, 3, 5*time.Second)

	setCapacity(ctx, t, s, node, "1")
	rejectedSaying(ctx, t, s, ns, "p-3", "", "underlay IPs exhausted: 3/1 used, pod needs 1", "underlay IPs exhausted: 3/3 used")
	// Lowering a capacity evicts no one: the three stay bound, p-3 waits.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if _, bound, pending, err := underlayUsage(ctx, s, ns); err != nil {
			t.Fatal(err)
		} else if bound != 3 || pending != 1 {
			t.Fatalf("after lowering the capacity to 1: %d bound and %d pending, want 3 and 1", bound, pending)
		}
	}

	setCapacity(ctx, t, s, node, "4")
	waitBoundWithin(ctx, t, s, ns, map[string]int{node: 4}, 4, 5*time.Second)
}

// setCapacity sets node's capacity annotation to v.
func setCapacity(ctx context.Context, t *testing.T, s *stack.Stack, node, v string) {
	t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"` + names.UnderlayIPCapacityAnnotation + `":"` + v + `"}}}`)
	if _, err := s.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rejectedSaying creates pods prefix-0, prefix-1, … (pinned to node unless
// it is "") one at a time until one is turned away with want in its
// PodScheduled message, and leaves that one waiting; it returns its name.
// kube-scheduler's Node and Pod watches are not ordered, so a pod made just
// after a Node write may be tried against the node as it was (CI, stop 76),
// and an extender's read of a source may lag the mirror's (stop 77): its
// message then says one of stale, and a capacity that only fell, or
// stayed, wakes no one (afterNodeUpdated), so it is deleted and the next
// one made. Any other message, or stale ones for a minute, fails the test.
func rejectedSaying(ctx context.Context, t *testing.T, s *stack.Stack, ns, prefix, node, want string, stale ...string) string {
	t.Helper()
	start := time.Now()
	for i := 0; time.Since(start) < time.Minute; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		p := underlayPod(ns, name, "p")
		if node != "" {
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		}
		createPods(ctx, t, s, p)
		waitRejected(ctx, t, s, ns, name)
		msg := scheduledMessage(ctx, t, s, ns, name)
		switch {
		case strings.Contains(msg, want):
			return name
		case !slices.ContainsFunc(stale, func(s string) bool { return strings.Contains(msg, s) }):
			t.Fatalf("pod %s waits saying %q, want %q", name, msg, want)
		}
		t.Logf("pod %s was tried against a view from before the write (%q); a new pod", name, msg)
		deleteAndWaitGone(ctx, t, s, ns, name)
	}
	t.Fatalf("for %s every pod was tried against a view from before the write (%q)", time.Since(start).Round(time.Second), stale)
	return ""
}

// scheduledMessage is the message of pod ns/name's PodScheduled condition.
func scheduledMessage(ctx context.Context, t *testing.T, s *stack.Stack, ns, name string) string {
	t.Helper()
	p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Message
		}
	}
	return ""
}

// pendingPod is the name of a pod of ns not bound; the test fails if none is.
func pendingPod(ctx context.Context, t *testing.T, s *stack.Stack, ns string) string {
	t.Helper()
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			return p.Name
		}
	}
	t.Fatalf("no pod of %s is pending", ns)
	return ""
}
