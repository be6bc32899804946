package publisher

import (
	"sync"
	"time"
)

// DefaultIncreasePeriod is how often, at most, a batch of capacity
// increases goes out while nodes' capacities keep rising.
//
// Why batch: kube-scheduler v1.37.2's NodeResourcesFit queueing hint
// (pkg/scheduler/framework/plugins/noderesources/fit.go:523-564) queues
// every pod it turned away on any node whose allocatable grew and could
// hold the pod, whatever the pod's node affinity; its queue runs each
// rejecting plugin's hint and one Queue wins
// (pkg/scheduler/backend/queue/scheduling_queue.go:587-657). So each
// increase retried every waiting pod, over every node: 26.5 ms of
// kube-scheduler's CPU a change at 5000 nodes and 20 waiting pods
// (BENCHMARKS.md, "A fresh install and a busy pool"). The first event of
// a batch moves the waiting pods to the active queue; the rest find them
// there, so a batch costs one retry a pod, not one a node.
const DefaultIncreasePeriod = 200 * time.Millisecond

// MaxIncreasePeriod bounds the period: an increase is free IPs that no pod
// may use while it waits.
const MaxIncreasePeriod = 5 * time.Second

// pacer holds capacity increases for the next batch. Decreases never wait
// (they go through sync without asking it): a capacity that shrank must
// reach kube-scheduler before it places another pod there. An increase
// after a quiet period goes at once and opens a batch; those that follow
// within the period wait for its end and go together. Bookkeeping only:
// the clock is the caller's.
type pacer struct {
	period time.Duration

	mu sync.Mutex
	// next is when the next batch may go.
	next time.Time
	// held is each waiting node's batch.
	held map[string]time.Time
}

func newPacer(period time.Duration) *pacer {
	return &pacer{period: period, held: map[string]time.Time{}}
}

// admit returns how long node's increase waits; 0: publish it now.
func (g *pacer) admit(node string, now time.Time) time.Duration {
	if g == nil || g.period <= 0 {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if at, ok := g.held[node]; ok {
		if now.Before(at) {
			return at.Sub(now)
		}
		delete(g.held, node)
		// The batch at goes now: what comes after it waits a period.
		if !g.next.After(at) {
			g.next = at.Add(g.period)
		}
		return 0
	}
	if !now.Before(g.next) {
		g.next = now.Add(g.period)
		return 0
	}
	g.held[node] = g.next
	return g.next.Sub(now)
}

// drop forgets node's wait: it was written otherwise (a decrease, the
// first publication) or is gone.
func (g *pacer) drop(node string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.held, node)
}

// waiting is how many nodes wait for a batch.
func (g *pacer) waiting() int {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held)
}
