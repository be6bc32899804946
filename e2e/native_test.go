//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// nativeCapacity is TestExtender's capacities with node 3 misannotated:
// 0,0,0,invalid (0), six of 3, ten of the default 10 — 118 IPs.
func nativeCapacity(i int) (annotation string, capacity int) {
	if i == 3 {
		return "lots", 0
	}
	return underlayCapacity(i)
}

// TestNativeCapacity is native mode on one plane of 20 nodes: the publisher
// puts the capacity into Node status, kube-scheduler alone enforces it.
func TestNativeCapacity(t *testing.T) {
	s := startStack(t, stack.Options{
		Plane: plane.Options{Nodes: 20, Logf: t.Logf, Node: func(i int, n *corev1.Node) {
			if a, _ := nativeCapacity(i); a != "" {
				n.Annotations[names.UnderlayIPCapacityAnnotation] = a
			}
		}},
		Native: true,
	})
	ctx := testContext(t, 12*time.Minute)
	capacity := map[string]int{}
	published := map[string]int64{}
	total := 0
	for i := range 20 {
		_, c := nativeCapacity(i)
		capacity[plane.NodeName(i)] = c
		published[plane.NodeName(i)] = int64(c)
		total += c
	}
	waitAllocatable(ctx, t, s, published, time.Minute)
	waitNodeEvent(ctx, t, s, plane.NodeName(3), "InvalidUnderlayIPCapacity")

	// The burst: more pods than IPs, no node over, the exact count bound,
	// the rest Pending with kube-scheduler's own reason.
	const ns = "native"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]int32{"alpha": 60, "beta": 50, "gamma": 40} {
		go func() {
			if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, name, n, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
				t.Errorf("creating %s: %v", name, err)
			}
		}()
	}
	waitUnderlay(ctx, t, s, ns, capacity, total, 150-total)
	waitPendingMessage(ctx, t, s, ns, "Insufficient "+names.UnderlayIPResource)
	assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)

	// kubectl describe node shows the capacity and what is allocated.
	out, err := s.Kubectl(ctx, "describe", "node", plane.NodeName(19))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, names.UnderlayIPResource+":") < 2 || !strings.Contains(out, names.UnderlayIPResource+"  10") {
		t.Errorf("kubectl describe node does not show capacity and allocation of %s:\n%s", names.UnderlayIPResource, out)
	}

	// An annotation change reaches allocatable within seconds, and kube-
	// scheduler places two more pods there.
	patch := []byte(`{"metadata":{"annotations":{"` + names.UnderlayIPCapacityAnnotation + `":"12"}}}`)
	if _, err := s.Client.CoreV1().Nodes().Patch(ctx, plane.NodeName(19), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	capacity[plane.NodeName(19)] = 12
	waitAllocatable(ctx, t, s, map[string]int64{plane.NodeName(19): 12}, 10*time.Second)
	waitUnderlay(ctx, t, s, ns, capacity, total+2, 150-total-2)

	// The publisher killed; a change made while it is down is published
	// once it is back: nothing is lost.
	s.KillExtender()
	patch = []byte(`{"metadata":{"annotations":{"` + names.UnderlayIPCapacityAnnotation + `":"11"}}}`)
	if _, err := s.Client.CoreV1().Nodes().Patch(ctx, plane.NodeName(18), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	assertNeverOver(ctx, t, s, ns, capacity, time.Second)
	if err := s.StartExtender(ctx); err != nil {
		t.Fatal(err)
	}
	capacity[plane.NodeName(18)] = 11
	// A restarted replica waits for the previous holder's Lease to expire
	// (15 s) unless that one released it; it was SIGKILLed.
	waitAllocatable(ctx, t, s, map[string]int64{plane.NodeName(18): 11}, 45*time.Second)
	waitUnderlay(ctx, t, s, ns, capacity, total+3, 150-total-3)
	assertNeverOver(ctx, t, s, ns, capacity, 2*time.Second)
}

// waitNodeEvent waits for an Event of reason about node.
func waitNodeEvent(ctx context.Context, t *testing.T, s *stack.Stack, node, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := s.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node + ",reason=" + reason})
		return err == nil && len(evs.Items) > 0, nil
	})
	if err != nil {
		t.Fatalf("no %s event on node %s", reason, node)
	}
}

// waitPendingMessage waits for a FailedScheduling event containing want.
func waitPendingMessage(ctx context.Context, t *testing.T, s *stack.Stack, ns, want string) {
	t.Helper()
	waitEventSaying(ctx, t, s, ns, "reason=FailedScheduling", want, time.Minute)
}

// waitEventSaying waits until an event of ns matching the field selector
// contains want, and returns its message.
func waitEventSaying(ctx context.Context, t *testing.T, s *stack.Stack, ns, selector, want string, timeout time.Duration) string {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		evs, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			last = e.Message
			if strings.Contains(e.Message, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no event of %s (%s) says %q; last: %q: %v", ns, selector, want, last, err)
	}
	return last
}
