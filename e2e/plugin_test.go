//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

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
