//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// The plane's own nodes in TestKarpenterNative: 4 CPUs and 4 underlay IPs
// each, so that a burst can run out of either.
const (
	karpenterStaticNodes = 2
	karpenterStaticIPs   = 4
	karpenterStaticCPU   = "4"
	// karpenterNodeIPs is deploy/examples/karpenter's budget for its one
	// instance type (the NodePool's label, the NodeOverlay's capacity).
	karpenterNodeIPs = 8
)

var nodeClaims = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}

// TestKarpenterNative: Karpenter (KWOK provider) grows a native-mode
// cluster when pods run out of underlay IPs, with deploy/examples/karpenter
// (NodePool with the startup taint and the capacity label, NodeOverlay
// with the same budget): the nodes launched are the minimum the pods need,
// for the resource that ran out, no node is ever over its capacity, and
// consolidation removes the nodes once the load leaves without putting a
// remaining pod over capacity.
func TestKarpenterNative(t *testing.T) {
	ctx, w := startKarpenterStack(t, stack.Options{Native: true}, "")
	s := w.s
	staticIPs := karpenterStaticNodes * karpenterStaticIPs

	// 1. IPs run out, CPU does not: 20 pods of one IP and 100m on 8 IPs
	// of 8 CPUs. Karpenter launches (20-8)/8 → 2 nodes; each gets its 8
	// IPs from the label, the taint goes, every pod binds.
	ips := w.grow(ctx, t, "ips", 20, podNeeds(1, "100m"), "Insufficient "+names.UnderlayIPResource)
	if want := minNodes(20-staticIPs, karpenterNodeIPs); ips.launched != want {
		t.Errorf("IPs ran out: %d nodes launched, the IPs need %d", ips.launched, want)
	}
	for _, n := range w.launchedNodes(ctx, t) {
		q := n.Status.Allocatable[underlay.Resource]
		for _, taint := range n.Spec.Taints {
			if taint.Key == names.UnderlayIPUnpublishedTaint {
				t.Errorf("node %s still carries the startup taint with its pods bound", n.Name)
			}
		}
		if q.Value() != karpenterNodeIPs {
			t.Errorf("node %s publishes %s=%s, want the label's %d", n.Name, names.UnderlayIPResource, q.String(), karpenterNodeIPs)
		}
	}
	// capscale, as the publisher, removed each launched node's taint.
	removed := taintRemovals(t, s)
	for _, n := range w.launchedNodes(ctx, t) {
		if !removed[n.Name] {
			t.Errorf("node %s: no taint removal by the publisher in the audit log (removals: %v)", n.Name, removed)
		}
	}
	t.Logf("karpenter-growth round=ips launched=%d minimum=%d pending-to-bound=%.1fs", ips.launched, minNodes(20-staticIPs, karpenterNodeIPs), ips.took.Seconds())

	// 2. The load leaves: down to 6 pods, which the plane's own 8 IPs
	// hold. Consolidation removes every launched node; the pods it moves
	// never put a node over.
	w.shrink(ctx, t, "ips", 6)
	w.shrink(ctx, t, "ips", 0)

	// 3. CPU runs out, IPs do not: 10 pods of one IP and 1500m. The plane's
	// nodes take 2 each by CPU (4 of their 8 IPs); a launched node's 3900m
	// (4 CPUs less the KWOK types' 100m kube-reserved) takes 2 of its 8
	// IPs: (10-4)/2 → 3 nodes, each with IPs to spare.
	cpu := w.grow(ctx, t, "cpu", 10, podNeeds(1, "1500m"), "Insufficient cpu")
	perNode := w.launchedCPU(ctx, t) / 1500
	if want := minNodes(10-4, perNode); cpu.launched != want || perNode != 2 {
		t.Errorf("CPU ran out: %d nodes launched of %d pods each, want %d nodes of 2", cpu.launched, perNode, want)
	}
	if free := w.freeIPsOnLaunched(ctx, t); free == 0 {
		t.Errorf("CPU ran out, yet the launched nodes have no IP left: launched for the wrong reason")
	}
	t.Logf("karpenter-growth round=cpu launched=%d minimum=%d pending-to-bound=%.1fs", cpu.launched, minNodes(10-4, perNode), cpu.took.Seconds())
	w.shrink(ctx, t, "cpu", 0)
}

func podNeeds(ips int64, cpu string) corev1.ResourceList {
	rl := underlayRequest(ips)
	rl[corev1.ResourceCPU] = resource.MustParse(cpu)
	rl[corev1.ResourceMemory] = resource.MustParse("64Mi")
	return rl
}

// startKarpenterStack starts a plane of karpenterStaticNodes with Karpenter
// and capscale in o's mode, applies deploy/examples/karpenter (then
// nodePoolPatch, a JSON patch of its NodePool, if any) and returns a
// context for the test and a watch on namespace grow.
func startKarpenterStack(t *testing.T, o stack.Options, nodePoolPatch string) (context.Context, *growthWatch) {
	t.Helper()
	o.Plane = plane.Options{Nodes: karpenterStaticNodes, Karpenter: true, Logf: t.Logf,
		NodeShape: plane.NodeShape{CPU: karpenterStaticCPU, Memory: "32Gi", Pods: "110"}}
	// With a capacity source, the plane's nodes take theirs from it too.
	if o.CapacitySources == "" {
		o.Plane.Node = func(_ int, n *corev1.Node) {
			n.Annotations[names.UnderlayIPCapacityAnnotation] = fmt.Sprint(karpenterStaticIPs)
		}
	}
	s := startStack(t, o)
	ctx := testContext(t, 15*time.Minute)
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := s.Kubectl(ctx, "apply", "-f", filepath.Join(plane.RepoRoot(), "deploy", "examples", "karpenter")); err != nil {
		t.Fatalf("applying deploy/examples/karpenter: %v\n%s", err, out)
	}
	if nodePoolPatch != "" {
		if out, err := s.Kubectl(ctx, "patch", "nodepool", "underlay", "--type=json", "-p", nodePoolPatch); err != nil {
			t.Fatalf("patching the NodePool: %v\n%s", err, out)
		}
	}
	if err := s.WaitKarpenterNodeClass(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	const ns = "grow"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ctx, &growthWatch{s: s, dyn: dyn, ns: ns}
}

// minNodes is the fewest nodes that hold pods pods, perNode each.
func minNodes(pods, perNode int) int {
	if perNode <= 0 {
		return -1
	}
	return (pods + perNode - 1) / perNode
}

// growthWatch polls the pods of ns and every node, failing at once when a
// node holds more underlay IPs than the capacity rule gives it.
type growthWatch struct {
	s   *stack.Stack
	dyn dynamic.Interface
	ns  string
	// limit bounds each wait; 4 minutes when 0.
	limit time.Duration
	// capacity, when set, is what each node may hold; the rule's
	// annotation and label otherwise.
	capacity func(ctx context.Context, nodes []corev1.Node) (map[string]int, error)
}

// capacities is what each of nodes may hold: by default the rule itself
// (annotation, label), whatever is published.
func (w *growthWatch) capacities(ctx context.Context, nodes []corev1.Node) (map[string]int, error) {
	if w.capacity != nil {
		return w.capacity(ctx, nodes)
	}
	out := map[string]int{}
	for _, n := range nodes {
		out[n.Name] = int(underlay.Rule{Default: 0}.Capacity(n.Annotations, n.Labels).IPs)
	}
	return out, nil
}

func (w *growthWatch) timeout() time.Duration {
	if w.limit > 0 {
		return w.limit
	}
	return 4 * time.Minute
}

type growth struct {
	launched int
	took     time.Duration
	// bound is when all were seen bound.
	bound time.Time
}

// look is what one poll saw of deployment app's pods (all of ns when app
// is "") and of the NodeClaims.
type look struct {
	bound, pending int
	// untried are the pending pods kube-scheduler has not yet marked
	// unschedulable.
	untried int
	// withReason: a pending pod's PodScheduled message names the reason.
	withReason bool
	claims     int
}

// poll is one look; it fails when a node holds more underlay IPs than its
// capacity.
func (w *growthWatch) poll(ctx context.Context, app, reason string) (look, error) {
	var l look
	// Pods first, then the nodes: a pod seen bound was bound before the
	// nodes are read, so a capacity the nodes show not yet was not there
	// at its binding either.
	pods, err := w.s.Client.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return l, err
	}
	nodes, err := w.s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return l, err
	}
	capacity, err := w.capacities(ctx, nodes.Items)
	if err != nil {
		return l, err
	}
	perNode := map[string]int{}
	for _, p := range pods.Items {
		// A node removed since (consolidation) is no longer judged.
		if _, ok := capacity[p.Spec.NodeName]; ok {
			q := p.Spec.Containers[0].Resources.Limits[names.UnderlayIPResource]
			perNode[p.Spec.NodeName] += int(q.Value())
		}
		if p.DeletionTimestamp != nil || (app != "" && p.Labels["app"] != app) {
			continue
		}
		if p.Spec.NodeName != "" {
			l.bound++
			continue
		}
		l.pending++
		tried := false
		for _, c := range p.Status.Conditions {
			if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse {
				continue
			}
			tried = tried || c.Reason == corev1.PodReasonUnschedulable
			l.withReason = l.withReason || strings.Contains(c.Message, reason)
		}
		if !tried {
			l.untried++
		}
	}
	if over := overCapacity(perNode, capacity); over != "" {
		return look{}, fmt.Errorf("nodes over underlay-IP capacity: %s", over)
	}
	list, err := w.dyn.Resource(nodeClaims).List(ctx, metav1.ListOptions{})
	if err != nil {
		return look{}, err
	}
	l.claims = len(list.Items)
	return l, nil
}

// grow creates Deployment app of replicas pods needing need, and waits until
// all are bound: it measures from the moment Karpenter may act on the
// burst (below), and counts the NodeClaims Karpenter made meanwhile (and in
// the seconds after, when a late one would show).
//
// Karpenter is paused until kube-scheduler has tried every pod, so that
// its first batch holds every pod it must launch for. A batch split by
// timing alone (kube-scheduler slower than Karpenter's 1-s idle window, as
// in extender mode under load) would launch a node more than a real
// provider does: the KWOK provider gives a new Node, and so its NodeClaim,
// only what its batch requested of an extended resource, not the
// NodeOverlay's capacity (kwok/cloudprovider/cloudprovider.go:228-232,
// v1.14.1), so a pod of the next batch does not fit the node launched for
// the first.
func (w *growthWatch) grow(ctx context.Context, t *testing.T, app string, replicas int32, need corev1.ResourceList, reason string) growth {
	t.Helper()
	start, err := w.poll(ctx, app, reason)
	if err != nil {
		t.Fatal(err)
	}
	resume := pauseProcess(t, w.s.Karpenter)
	if _, err := w.s.Client.AppsV1().Deployments(w.ns).Create(ctx, SimpleDeployment(w.ns, app, replicas, need), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every pod exists and is bound or marked unschedulable.
	var seen bool
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, w.timeout(), true, func(ctx context.Context) (bool, error) {
		l, err := w.poll(ctx, app, reason)
		seen = seen || l.withReason
		return l.bound+l.pending == int(replicas) && l.untried == 0, err
	})
	if err != nil {
		t.Fatalf("%s: kube-scheduler did not try every pod of the burst: %v", app, err)
	}
	if !seen {
		t.Fatalf("%s: no pod was seen Pending with %q: the burst did not run out of what it should", app, reason)
	}
	resume()
	first := time.Now()
	var g growth
	var l look
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, w.timeout(), true, func(ctx context.Context) (bool, error) {
		got, err := w.poll(ctx, app, reason)
		if err != nil {
			return false, err
		}
		l = got
		return l.bound == int(replicas), nil
	})
	if err != nil {
		t.Fatalf("%s: %d of %d bound, %d pending: %v", app, l.bound, replicas, l.pending, err)
	}
	g.bound = time.Now()
	g.took = g.bound.Sub(first)
	// A node launched late (a second batch) would show within Karpenter's
	// 10s batch window.
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if l, err = w.poll(ctx, app, reason); err != nil {
			t.Fatal(err)
		}
	}
	g.launched = l.claims - start.claims
	return g
}

// pauseProcess stops proc (SIGSTOP) until the returned func, or the
// test's end, continues it; nil when proc is nil.
func pauseProcess(t *testing.T, proc *plane.Process) (resume func()) {
	t.Helper()
	if proc == nil {
		return func() {}
	}
	if err := syscall.Kill(proc.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatalf("pausing %s: %v", proc.Name, err)
	}
	resume = sync.OnceFunc(func() { _ = syscall.Kill(proc.Pid(), syscall.SIGCONT) })
	t.Cleanup(resume)
	return resume
}

// shrink scales app to replicas (deletes it at 0) and waits until
// Karpenter has removed every node it launched and replicas pods are bound,
// polling that no node is over meanwhile.
func (w *growthWatch) shrink(ctx context.Context, t *testing.T, app string, replicas int32) {
	t.Helper()
	var err error
	if replicas == 0 {
		err = w.s.Client.AppsV1().Deployments(w.ns).Delete(ctx, app, metav1.DeleteOptions{})
	} else {
		_, err = w.s.Kubectl(ctx, "scale", "-n", w.ns, "deployment/"+app, fmt.Sprintf("--replicas=%d", replicas))
	}
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var l look
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, w.timeout(), true, func(ctx context.Context) (bool, error) {
		got, err := w.poll(ctx, app, "")
		if err != nil {
			return false, err
		}
		l = got
		return l.bound == int(replicas) && l.pending == 0 && l.claims == 0, nil
	})
	if err != nil {
		t.Fatalf("%s down to %d: %d bound, %d NodeClaims left: %v", app, replicas, l.bound, l.claims, err)
	}
	t.Logf("karpenter-consolidation app=%s replicas=%d nodes-removed-in=%.1fs", app, replicas, time.Since(start).Seconds())
}

// launchedNodes are the Nodes Karpenter launched.
func (w *growthWatch) launchedNodes(ctx context.Context, t *testing.T) []corev1.Node {
	t.Helper()
	nodes, err := w.s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodepool"})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) == 0 {
		t.Fatal("no node launched by Karpenter")
	}
	return nodes.Items
}

// launchedCPU is the allocatable CPU (millicores) of a launched node.
func (w *growthWatch) launchedCPU(ctx context.Context, t *testing.T) int {
	n := w.launchedNodes(ctx, t)[0]
	q := n.Status.Allocatable[corev1.ResourceCPU]
	return int(q.MilliValue())
}

// freeIPsOnLaunched is what the launched nodes have left of their
// published capacity.
func (w *growthWatch) freeIPsOnLaunched(ctx context.Context, t *testing.T) int {
	free := 0
	for _, n := range w.launchedNodes(ctx, t) {
		q := n.Status.Allocatable[underlay.Resource]
		free += int(q.Value())
		pods, err := w.s.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			r := p.Spec.Containers[0].Resources.Limits[underlay.Resource]
			free -= int(r.Value())
		}
	}
	return free
}

// taintRemovals are the nodes the publisher (the extender's ServiceAccount)
// patched successfully, as the audit log says: it patches a Node, not its
// status, only to remove the startup taint.
func taintRemovals(t *testing.T, s *stack.Stack) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, ev := range auditWrites(t, s.AuditLog) {
		if ev.Verb == "patch" && ev.ObjectRef.Resource == "nodes" && ev.ObjectRef.Subresource == "" && ev.ResponseStatus.Code == 200 &&
			ev.User.Username == "system:serviceaccount:"+stack.Namespace+":capscale-extender" {
			out[ev.ObjectRef.Name] = true
		}
	}
	return out
}
