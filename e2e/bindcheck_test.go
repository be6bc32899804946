//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestPluginBindCheck: capscale-scheduler's view of a Node trails the
// apiserver; while its Node watch is away (here frozen by a watchGate: the
// stream open, its events thrown away, as while a watch reconnects after a
// kube-apiserver restart), a node's capacity is lowered to what its pods
// hold. Pods created then are not bound there: the check at bind reads the
// Node from the apiserver and refuses, with the reason in the pod's event.
// Once the watch is back they wait as for any full node, and they bind
// when the capacity grows. The soak caught the stale bind after a restart
// (kwok-node-020 holding 9 IPs of 0).
func TestPluginBindCheck(t *testing.T) {
	gate := newWatchGate(t, "/api/v1/nodes")
	s := startStack(t, stack.Options{
		Plane: plane.Options{Nodes: 2, Logf: t.Logf, Node: func(i int, n *corev1.Node) {
			n.Annotations[names.UnderlayIPCapacityAnnotation] = []string{"10", "0"}[i]
		}},
		Prepare: func(_ context.Context, s *stack.Stack) error { return gate.connect(s) },
	})
	ctx := testContext(t, 5*time.Minute)
	const ns = "bind-check"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartPluginSchedulerReplicaVia(ctx, "capscale-scheduler-gated", gate.srv.URL); err != nil {
		t.Fatal(err)
	}
	node := plane.NodeName(0)
	pod := func(name string) *corev1.Pod {
		p := underlayPod(ns, name, "bind-check")
		p.Spec.SchedulerName = "capscale-scheduler"
		return p
	}

	createPods(ctx, t, s, pod("first"))
	waitPodBound(ctx, t, s, ns, "first")
	gate.freeze()
	setCapacity(ctx, t, s, node, "1")
	createPods(ctx, t, s, pod("a"), pod("b"), pod("c"))
	stayBoundPending(ctx, t, s, ns, 1, 3, 10*time.Second)
	msg := waitEventSaying(ctx, t, s, ns, "reason=FailedScheduling", "changed since the scheduler read it", time.Minute)
	t.Logf("with the Node watch frozen at capacity 10, the pods' event: %s", msg)

	gate.thaw()
	waitEventSaying(ctx, t, s, ns, "reason=FailedScheduling", "underlay IPs exhausted: 1/1 used", time.Minute)
	stayBoundPending(ctx, t, s, ns, 1, 3, 3*time.Second)
	setCapacity(ctx, t, s, node, "4")
	waitUnderlay(ctx, t, s, ns, map[string]int{node: 4, plane.NodeName(1): 0}, 4, 0)
}
