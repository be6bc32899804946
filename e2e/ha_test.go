//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// overCommitWatch polls the pods of ns every 100ms until stopped:
// "0 nodes over capacity at any poll".
type overCommitWatch struct{ *pollWatch }

func watchOverCommit(ctx context.Context, s *stack.Stack, ns string, capacity map[string]int) overCommitWatch {
	return overCommitWatch{startPollWatch(ctx, 100*time.Millisecond, func(ctx context.Context) (string, bool) {
		// Polls fail while the apiserver is down; those are not counted.
		perNode, _, _, err := underlayUsage(ctx, s, ns)
		if err != nil {
			return "", false
		}
		return overCapacity(perNode, capacity), true
	})}
}

// check stops the watch and fails t if any poll saw a node over capacity.
func (w overCommitWatch) check(t *testing.T) {
	t.Helper()
	w.pollWatch.check(t, "nodes over underlay-IP capacity")
	t.Logf("over-commit watch: %d polls", w.polls)
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

// standbyLedgerMatches waits, after the leader replica was killed, until
// the standby's extender, which has followed the pods all along, holds no
// reservation and counts every bind the dead leader made, and fails if its
// scheduler took the lease before that or its extender bound anything. It
// returns the pods bound at the kill.
func standbyLedgerMatches(ctx context.Context, t *testing.T, s *stack.Stack, ns string, b *stack.SchedulerReplica, killed time.Time) int {
	t.Helper()
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
	t.Logf("standby ledger matched the apiserver %s after the kill", matched.Round(time.Millisecond))
	return boundAtKill
}

// newLeaderLedgerMatches checks the new leader's ledger against the pods
// once the burst is placed: every one of the total IPs used.
func newLeaderLedgerMatches(ctx context.Context, t *testing.T, s *stack.Stack, ns string, b *stack.SchedulerReplica, total int) {
	t.Helper()
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
}
