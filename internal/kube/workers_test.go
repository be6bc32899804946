package kube

import (
	"context"
	"sync/atomic"
	"testing"
)

type queue struct{ shut chan struct{} }

func (q *queue) ShutDown() { close(q.shut) }

// RunWorkers returns only after the queue is shut down and every worker
// (here each blocked until then, as on a workqueue's Get) has returned.
func TestRunWorkers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	q := &queue{shut: make(chan struct{})}
	var started, done atomic.Int32
	worker := func(context.Context) {
		if started.Add(1) == 3 {
			cancel()
		}
		<-q.shut
		done.Add(1)
	}
	RunWorkers(ctx, 3, worker, q)
	if s, d := started.Load(), done.Load(); s != 3 || d != 3 {
		t.Fatalf("started %d, done %d when RunWorkers returned; want 3 and 3", s, d)
	}
}
