//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// The scheduling behaviours every mode promises, run once per mode from
// one table: `go test -tags e2e -run 'TestScheduling.*/plugin' ./e2e/`
// runs one mode. What only one mode has (the extender killed mid-burst,
// native mode's published capacity, plugin mode's ranking by count) stays
// in that mode's own tests.

// schedulingMode is one way capscale enforces the underlay-IP rule.
type schedulingMode struct {
	name string
	// stack wraps plane options in this mode's stack: the scheduler that
	// the plane's pods use enforces the rule.
	stack func(po plane.Options) stack.Options
	// exhausted is what a Pending pod's FailedScheduling event says when
	// every IP is taken; unresolvable what it says of a node of capacity
	// 0, and of one whose annotation is invalid ("" where the mode has no
	// words of its own for them).
	exhausted, tooSmall, invalid string
	// preempts: kube-scheduler's preemption dry run sees the IPs.
	preempts bool
	// exactRanking: the node with the most free IPs always wins, whatever
	// the other scores say.
	exactRanking bool
	// failoverStack and replica give two scheduler replicas of this mode
	// for the failover: the pods name capscale-scheduler.
	failoverStack func(po plane.Options) stack.Options
	replica       func(ctx context.Context, s *stack.Stack, name string) (*stack.SchedulerReplica, error)
}

var schedulingModes = []schedulingMode{
	{
		name:          "extender",
		stack:         func(po plane.Options) stack.Options { return stack.Options{Plane: po, Extender: true} },
		exhausted:     "underlay IPs exhausted: 3/3 used, pod needs 1",
		tooSmall:      "underlay IP capacity too small: node has 0, pod needs 1",
		invalid:       "invalid " + names.UnderlayIPCapacityAnnotation + " annotation",
		exactRanking:  true,
		failoverStack: func(po plane.Options) stack.Options { return stack.Options{Plane: po} },
		replica: func(ctx context.Context, s *stack.Stack, name string) (*stack.SchedulerReplica, error) {
			return s.StartSchedulerReplica(ctx, name)
		},
	},
	{
		// kube-scheduler counts the published resource: its own words.
		name:          "native",
		stack:         func(po plane.Options) stack.Options { return stack.Options{Plane: po, Native: true} },
		exhausted:     "Insufficient " + names.UnderlayIPResource,
		preempts:      true,
		failoverStack: func(po plane.Options) stack.Options { return stack.Options{Plane: po, Native: true} },
		replica: func(ctx context.Context, s *stack.Stack, name string) (*stack.SchedulerReplica, error) {
			return s.StartNativeSchedulerReplica(ctx, name)
		},
	},
	{
		name:         "plugin",
		stack:        func(po plane.Options) stack.Options { return stack.Options{Plane: po, Plugin: true} },
		exhausted:    "underlay IPs exhausted: 3/3 used, pod needs 1",
		tooSmall:     "underlay IP capacity too small: node has 0, pod needs 1",
		invalid:      "invalid " + names.UnderlayIPCapacityAnnotation + " annotation",
		preempts:     true,
		exactRanking: true,
		// Not Plugin: the plane's own scheduler would then serve the
		// capscale-scheduler profile beside the replicas.
		failoverStack: func(po plane.Options) stack.Options { return stack.Options{Plane: po} },
		replica: func(ctx context.Context, s *stack.Stack, name string) (*stack.SchedulerReplica, error) {
			return s.StartPluginSchedulerReplica(ctx, name)
		},
	},
}

// forEachMode runs f as one subtest per scheduling mode.
func forEachMode(t *testing.T, f func(t *testing.T, m schedulingMode)) {
	for _, m := range schedulingModes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// startModeStack starts m's stack on nodes nodes, node i annotated with
// annotation(i) ("" for none), and in native mode waits until every
// node's capacity is published (an invalid annotation publishes 0).
func startModeStack(t *testing.T, m schedulingMode, nodes int, annotation func(i int) string, capacity func(i int) int) *stack.Stack {
	t.Helper()
	s := startStack(t, m.stack(plane.Options{Nodes: nodes, Logf: t.Logf, Node: func(i int, n *corev1.Node) {
		if a := annotation(i); a != "" {
			n.Annotations[names.UnderlayIPCapacityAnnotation] = a
		}
	}}))
	if s.Opts.Native {
		want := map[string]int64{}
		for i := range nodes {
			want[plane.NodeName(i)] = int64(capacity(i))
		}
		waitAllocatable(testContext(t, 2*time.Minute), t, s, want, time.Minute)
	}
	return s
}

// burstPlane is the burst's 20 nodes: capacity 0 (three), an invalid
// annotation (one, so 0), 3 (six) and the default 10 (ten): 118 IPs.
func burstPlane() (annotation func(int) string, capacityOf func(int) int, capacity map[string]int, total int) {
	annotation = func(i int) string { a, _ := nativeCapacity(i); return a }
	capacityOf = func(i int) int { _, c := nativeCapacity(i); return c }
	capacity = map[string]int{}
	for i := range 20 {
		capacity[plane.NodeName(i)] = capacityOf(i)
		total += capacityOf(i)
	}
	return annotation, capacityOf, capacity, total
}

// TestSchedulingBurst: 150 pods for 118 IPs, created at once by three
// Deployments. Exactly 118 bound, no node over capacity at any poll, the
// Pending pods' events name the IPs; then the IPs of a deleted Deployment go
// to the Pending pods of the others (110 fit in 118).
func TestSchedulingBurst(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		annotation, capacityOf, capacity, total := burstPlane()
		s := startModeStack(t, m, 20, annotation, capacityOf)
		ctx := testContext(t, 8*time.Minute)
		const ns = "burst"
		if err := s.WaitForNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		watch := watchOverCommit(ctx, s, ns, capacity)
		for name, n := range map[string]int32{"alpha": 60, "beta": 50, "gamma": 40} {
			go func() {
				if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, name, n, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
					t.Errorf("creating %s: %v", name, err)
				}
			}()
		}
		waitUnderlay(ctx, t, s, ns, capacity, total, 150-total)
		for _, want := range []string{m.exhausted, m.tooSmall, m.invalid} {
			if want != "" {
				waitPendingMessage(ctx, t, s, ns, want)
			}
		}
		assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)
		if err := s.Client.AppsV1().Deployments(ns).Delete(ctx, "gamma", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUnderlay(ctx, t, s, ns, capacity, 110, 0)
		watch.check(t)
	})
}

// TestSchedulingMostFreeFirst: a preferred node affinity (the strongest
// in-tree score) to the node with the fewest free IPs never wins over a
// node with more, on nodes of 10, 9 and 8 IPs. Native mode ranks by
// NodeResourcesFit's LeastAllocated, which the affinity can outweigh:
// TestNativeRanking and TestMostFreeByCount show what it does instead.
func TestSchedulingMostFreeFirst(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		if !m.exactRanking {
			t.Skipf("%s mode does not promise most free IPs first (docs/choosing-a-mode.md); TestNativeRanking tests its ranking", m.name)
		}
		caps := []int{10, 9, 8}
		s := startModeStack(t, m, 3, func(i int) string { return []string{"10", "9", "8"}[i] }, func(i int) int { return caps[i] })
		mostFreeFirst(t, s, map[string]int{plane.NodeName(0): 10, plane.NodeName(1): 9, plane.NodeName(2): 8})
	})
}

// TestSchedulingPreemption: two nodes of 2 IPs full of low-priority pods,
// then a high-priority pod. Where the preemption dry run sees the IPs
// (native and plugin mode) one low-priority pod is evicted and the
// high-priority pod takes its IP. In extender mode kube-scheduler's dry run
// runs only in-tree filters, finds no victim and never calls /preempt: the
// pod stays Pending, as docs/failure-and-recovery.md says.
func TestSchedulingPreemption(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		s := startModeStack(t, m, 2, func(int) string { return "2" }, func(int) int { return 2 })
		ctx := testContext(t, 4*time.Minute)
		if m.preempts {
			preemptionTakesIP(ctx, t, s, "preempt")
			return
		}
		preemptionRefused(ctx, t, s, "preempt")
	})
}

// TestSchedulingFreedIPReuse: a freed IP is reused within 5 s, 20 times in
// a row (freedIPReuse). Extender mode requeues the waiting pod with a
// bounded write; native and plugin mode by kube-scheduler's queueing hints
// alone.
func TestSchedulingFreedIPReuse(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		s := startModeStack(t, m, 2, func(int) string { return "2" }, func(int) int { return 2 })
		if m.name == "extender" {
			// Also the requeuer's writes and the waiting set.
			freedIPReuseExtender(t, s)
			return
		}
		freedIPReuse(t, s)
	})
}

// TestSchedulingFailover: two scheduler replicas of the mode, as the
// identity and RBAC deploy/ gives them, place a burst of 150 pods on 118
// IPs; the leader is killed with SIGKILL mid-burst. The standby takes the
// Lease and places the rest: exactly 118 bound, no node over capacity at
// any poll. In extender mode the standby's extender must already count
// every bind of the dead leader before its scheduler leads.
func TestSchedulingFailover(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		annotation, capacityOf, capacity, total := burstPlane()
		po := plane.Options{Nodes: 20, Logf: t.Logf, Node: func(i int, n *corev1.Node) {
			if a := annotation(i); a != "" {
				n.Annotations[names.UnderlayIPCapacityAnnotation] = a
			}
		}}
		s := startStack(t, m.failoverStack(po))
		ctx := testContext(t, 8*time.Minute)
		if s.Opts.Native {
			want := map[string]int64{}
			for i := range 20 {
				want[plane.NodeName(i)] = int64(capacityOf(i))
			}
			waitAllocatable(ctx, t, s, want, time.Minute)
		}
		const ns = "failover"
		if err := s.WaitForNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		a, err := m.replica(ctx, s, "scheduler-a")
		if err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return a.Leads(), nil
		}); err != nil {
			t.Fatalf("scheduler-a never acquired the lease: %v\n%s", err, a.Scheduler.Tail(20))
		}
		b, err := m.replica(ctx, s, "scheduler-b")
		if err != nil {
			t.Fatal(err)
		}
		watch := watchOverCommit(ctx, s, ns, capacity)
		const pods = 150
		d := SimpleDeployment(ns, "burst", pods, underlayRequest(1))
		d.Spec.Template.Spec.SchedulerName = "capscale-scheduler"
		if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitBound(ctx, t, s, ns, 30)
		a.Kill()
		killed := time.Now()
		if b.Leads() {
			t.Fatal("scheduler-b leads while scheduler-a was alive")
		}
		boundAtKill := 0
		if b.Extender != nil {
			boundAtKill = standbyLedgerMatches(ctx, t, s, ns, b, killed)
		} else if _, boundAtKill, _, err = underlayUsage(ctx, s, ns); err != nil {
			t.Fatal(err)
		}
		waitLeaderless(ctx, t, s, ns, b, killed, total)
		takeover := time.Since(killed)
		waitUnderlay(ctx, t, s, ns, capacity, total, pods-total)
		placed := time.Since(killed)
		assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)
		watch.check(t)
		if b.Extender != nil {
			newLeaderLedgerMatches(ctx, t, s, ns, b, total)
		}
		t.Logf("failover figures: killed at %d/%d bound; lease taken over after %s; all %d IPs used after %s",
			boundAtKill, total, takeover.Round(time.Millisecond), total, placed.Round(time.Millisecond))
	})
}

// waitLeaderless waits until scheduler-b leads, and fails if any pod of ns
// was bound in between: a second after the kill (the dead leader's binds in
// flight land or fail by then) the bound pods must stay as they are until b
// logs its lease, and IPs must be left for b to place. Each count is read
// before b's log: b binds only after logging its lease, so a count read
// while the log has no lease holds none of b's binds.
func waitLeaderless(ctx context.Context, t *testing.T, s *stack.Stack, ns string, b *stack.SchedulerReplica, killed time.Time, total int) {
	t.Helper()
	time.Sleep(time.Until(killed.Add(time.Second)))
	_, settled, _, err := underlayUsage(ctx, s, ns)
	if err != nil {
		t.Fatal(err)
	}
	if b.Leads() {
		t.Fatalf("scheduler-b leads a second after the kill")
	}
	if settled >= total {
		t.Fatalf("all %d IPs were used before scheduler-b led: another scheduler serves its pods", total)
	}
	polls := 0
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, bound, _, err := underlayUsage(ctx, s, ns)
		if b.Leads() {
			return true, nil
		}
		if err != nil {
			return false, nil
		}
		polls++
		if bound != settled {
			return false, fmt.Errorf("%d pods bound while no replica led (%d a second after the kill): another scheduler serves its pods", bound, settled)
		}
		return false, nil
	})
	if wait.Interrupted(err) {
		t.Fatalf("scheduler-b never took the lease over: %v\n%s", err, b.Scheduler.Tail(20))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("no bind while no replica led: %d pods bound at %d polls", settled, polls)
}
