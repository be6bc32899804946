//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
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

// startNativeOneNode is native mode on one kwok node annotated capacity.
func startNativeOneNode(t *testing.T, capacity int64) (*stack.Stack, string) {
	t.Helper()
	s := startStack(t, stack.Options{
		Plane: plane.Options{Nodes: 1, Logf: t.Logf, Node: func(_ int, n *corev1.Node) {
			n.Annotations[names.UnderlayIPCapacityAnnotation] = fmt.Sprint(capacity)
		}},
		Native: true,
	})
	node := plane.NodeName(0)
	waitAllocatable(testContext(t, time.Minute), t, s, map[string]int64{node: capacity}, time.Minute)
	return s, node
}

// annotateCapacity sets node's capacity annotation to v.
func annotateCapacity(ctx context.Context, t *testing.T, s *stack.Stack, node, v string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, names.UnderlayIPCapacityAnnotation, v)
	if _, err := s.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating node %s: %v", node, err)
	}
}

// waitLogCount waits until the extender's log (every run of it) holds line
// at least n times.
func waitLogCount(ctx context.Context, t *testing.T, s *stack.Stack, line string, n int, limit time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, limit, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(s.Extender.LogFile)
		return err == nil && strings.Count(string(b), line) >= n, nil
	})
	if err != nil {
		t.Fatalf("extender log does not say %q %d times within %s", line, n, limit)
	}
}

// TestNativePublisherSecondTerm is issue 31's first fault: kube-apiserver
// away longer than the publisher's renew deadline (10 s) makes it lose its
// Lease; once the apiserver is back the same replica wins it again and must
// publish again, not hold the Lease and do nothing.
func TestNativePublisherSecondTerm(t *testing.T) {
	s, node := startNativeOneNode(t, 4)
	ctx := testContext(t, 5*time.Minute)
	const started, lost = "Publishing underlay-IP capacity in Node status", "Capacity publisher lost or left its lease"
	waitLogCount(ctx, t, s, started, 1, 30*time.Second)

	if err := s.Halt("kube-apiserver", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitLogCount(ctx, t, s, lost, 1, time.Minute)
	if err := s.Resume(ctx, "kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	waitLogCount(ctx, t, s, started, 2, 2*time.Minute)
	// The node informer reconnects on its own backoff (up to 30 s): the
	// extender is ready once its watches follow the apiserver again.
	c, err := s.ExtenderHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	waitReadiness(ctx, t, c, []readyzProbe{{"extender", s.ExtenderURL + "/readyz", s.Extender}}, true, 2*time.Minute)

	annotateCapacity(ctx, t, s, node, "6")
	waitAllocatable(ctx, t, s, map[string]int64{node: 6}, 10*time.Second)
}

// TestNativeInvalidKeepsInUse is issue 31's second fault: a node whose
// capacity annotation turns invalid under running underlay pods keeps
// publishing at least what they hold (the kubelet re-admits them against
// allocatable when it restarts), while no new pod fits there; a valid value
// is published again.
func TestNativeInvalidKeepsInUse(t *testing.T) {
	s, node := startNativeOneNode(t, 4)
	ctx := testContext(t, 5*time.Minute)
	const ns = "invalid"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	const inUse = 3
	var pods []*corev1.Pod
	for i := range inUse {
		pods = append(pods, underlayPod(ns, fmt.Sprintf("held-%d", i), "held"))
	}
	createPods(ctx, t, s, pods...)
	waitBound(ctx, t, s, ns, inUse)

	annotateCapacity(ctx, t, s, node, "lots")
	// At every poll, nothing published below what the pods hold.
	assertPublishedAtLeast := func(d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for polls := 0; time.Now().Before(deadline); polls++ {
			n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c, a := n.Status.Capacity[names.UnderlayIPResource], n.Status.Allocatable[names.UnderlayIPResource]
			if c.Value() < inUse || a.Value() < inUse {
				t.Fatalf("poll %d: node %s publishes capacity %s allocatable %s under %d IPs in use", polls, node, c.String(), a.String(), inUse)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	assertPublishedAtLeast(10 * time.Second)
	waitAllocatable(ctx, t, s, map[string]int64{node: inUse}, 10*time.Second)
	waitNodeEvent(ctx, t, s, node, "InvalidUnderlayIPCapacity")
	evs, err := s.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node + ",reason=InvalidUnderlayIPCapacity"})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s=%d", names.UnderlayIPResource, inUse); len(evs.Items) == 0 || !strings.Contains(evs.Items[0].Message, want) {
		t.Errorf("InvalidUnderlayIPCapacity events %v do not name %s", evs.Items, want)
	}

	// No room for a new underlay pod: kube-scheduler rejects it.
	createPods(ctx, t, s, underlayPod(ns, "extra", "extra"))
	waitRejected(ctx, t, s, ns, "extra")
	assertPublishedAtLeast(3 * time.Second)
	p, err := s.Client.CoreV1().Pods(ns).Get(ctx, "extra", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("extra pod bound to %s, whose capacity is invalid", p.Spec.NodeName)
	}

	// A valid value again: published, and the waiting pod fits.
	annotateCapacity(ctx, t, s, node, "5")
	waitAllocatable(ctx, t, s, map[string]int64{node: 5}, 10*time.Second)
	waitBound(ctx, t, s, ns, inUse+1)
}
