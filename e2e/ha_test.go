//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/internal/names"
)

// underlayPlane is the 20-node plane of TestExtender (118 underlay IPs) and
// each node's capacity.
func underlayPlane(t *testing.T) (plane.Options, map[string]int, int) {
	capacity := map[string]int{}
	total := 0
	for i := 0; i < 20; i++ {
		_, c := underlayCapacity(i)
		capacity[plane.NodeName(i)] = c
		total += c
	}
	return plane.Options{
		Nodes: 20, Logf: t.Logf,
		Node: func(i int, n *corev1.Node) {
			if a, _ := underlayCapacity(i); a != "" {
				n.Annotations[names.UnderlayIPCapacityAnnotation] = a
			}
		},
	}, capacity, total
}

// overCommitWatch polls the pods of ns every 100ms until stopped and keeps
// the first node found over capacity: "0 nodes over capacity at any poll".
type overCommitWatch struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	over  string
	polls int
}

func watchOverCommit(ctx context.Context, s *stack.Stack, ns string, capacity map[string]int) *overCommitWatch {
	w := &overCommitWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			// Polls fail while the apiserver is down; those are not counted.
			perNode, _, _, err := underlayUsage(ctx, s, ns)
			if err != nil {
				continue
			}
			w.mu.Lock()
			w.polls++
			if over := overCapacity(perNode, capacity); over != "" && w.over == "" {
				w.over = over
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// check stops the watch and fails t if any poll saw a node over capacity.
func (w *overCommitWatch) check(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.over != "" {
		t.Errorf("nodes over underlay-IP capacity at a poll: %s", w.over)
	}
	t.Logf("over-commit watch: %d polls, none over capacity: %v", w.polls, w.over == "")
}

// waitBound waits until at least n pods of ns are bound to a node.
func waitBound(ctx context.Context, t *testing.T, s *stack.Stack, ns string, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, bound, _, err := underlayUsage(ctx, s, ns)
		return err == nil && bound >= n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d bound pods in %s: %v", n, ns, err)
	}
}

// capacityReport reads an extender's /capacity.
func capacityReport(ctx context.Context, url string) (extender.Report, error) {
	var rep extender.Report
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/capacity", nil)
	if err != nil {
		return rep, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rep, fmt.Errorf("GET %s/capacity: %s", url, resp.Status)
	}
	return rep, json.NewDecoder(resp.Body).Decode(&rep)
}

// ledgerMatches compares an extender's per-node used IPs with the pods the
// apiserver shows bound.
func ledgerMatches(rep extender.Report, perNode map[string]int) string {
	seen := map[string]bool{}
	for _, n := range rep.Nodes {
		seen[n.Name] = true
		if int(n.Used) != perNode[n.Name] {
			return fmt.Sprintf("node %s: ledger used %d, apiserver %d", n.Name, n.Used, perNode[n.Name])
		}
	}
	for node, used := range perNode {
		if !seen[node] && used > 0 {
			return fmt.Sprintf("node %s missing from the ledger (apiserver %d)", node, used)
		}
	}
	return ""
}

// TestSchedulerFailover is issue 18's HA scenario for deploy/scheduler: two
// replicas of capscale-scheduler (kube-scheduler with leader election, each
// with its own extender, as ServiceAccount capscale-scheduler with the RBAC
// of deploy/scheduler/) place a burst of 150 underlay pods on 118 IPs. The
// leader and its extender are killed with SIGKILL mid-burst. The standby's
// extender, which has followed the pods all along, must hold no reservation
// and already count every bind the dead leader made before its scheduler
// takes the lease; then it places the rest: exactly 118 bound, and no node
// over capacity at any poll.
func TestSchedulerFailover(t *testing.T) {
	po, capacity, total := underlayPlane(t)
	s := startStack(t, stack.Options{Plane: po})
	ctx := testContext(t, 8*time.Minute)
	const ns = "failover"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	a, err := s.StartSchedulerReplica(ctx, "scheduler-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return a.Leads(), nil
	}); err != nil {
		t.Fatalf("scheduler-a never acquired the lease: %v\n%s", err, a.Scheduler.Tail(20))
	}
	b, err := s.StartSchedulerReplica(ctx, "scheduler-b")
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

	// Binds the dead extender sent may land for a moment; then the truth
	// stays put until scheduler-b leads.
	time.Sleep(500 * time.Millisecond)
	truth, boundAtKill, _, err := underlayUsage(ctx, s, ns)
	if err != nil {
		t.Fatal(err)
	}
	var lagged string
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		rep, err := capacityReport(ctx, b.ExtenderURL)
		if err != nil {
			lagged = err.Error()
			return false, nil
		}
		if rep.Totals.Reserved != 0 {
			return false, fmt.Errorf("standby extender holds %d reserved IPs", rep.Totals.Reserved)
		}
		lagged = ledgerMatches(rep, truth)
		return lagged == "", nil
	})
	matched := time.Since(killed)
	if err != nil {
		t.Fatalf("standby extender's ledger does not match the %d pods bound by the dead leader: %s: %v", boundAtKill, lagged, err)
	}
	if b.Leads() {
		t.Fatalf("scheduler-b took the lease before its extender's ledger was checked (%s after the kill)", matched)
	}
	if calls := scrapeCounterAt(ctx, t, b.ExtenderURL, `capscale_extender_binds_total{result="bound"}`); calls != 0 {
		t.Fatalf("the standby extender bound %v pods", calls)
	}

	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return b.Leads(), nil
	}); err != nil {
		t.Fatalf("scheduler-b never took the lease over: %v\n%s", err, b.Scheduler.Tail(20))
	}
	takeover := time.Since(killed)
	waitBound(ctx, t, s, ns, boundAtKill+1)
	firstBind := time.Since(killed)
	waitUnderlay(ctx, t, s, ns, capacity, total, pods-total)
	placed := time.Since(killed)
	assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)
	watch.check(t)

	rep, err := capacityReport(ctx, b.ExtenderURL)
	if err != nil {
		t.Fatal(err)
	}
	final, _, _, err := underlayUsage(ctx, s, ns)
	if err != nil {
		t.Fatal(err)
	}
	if m := ledgerMatches(rep, final); m != "" || rep.Totals.Used != int64(total) {
		t.Errorf("new leader's ledger after the burst: %s (used %d of %d)", m, rep.Totals.Used, total)
	}
	t.Logf("failover figures: killed at %d/%d bound; standby ledger matched the apiserver %s after the kill; "+
		"lease taken over after %s; first new bind after %s; all %d IPs used after %s",
		boundAtKill, total, matched.Round(time.Millisecond), takeover.Round(time.Millisecond),
		firstBind.Round(time.Millisecond), total, placed.Round(time.Millisecond))
}
