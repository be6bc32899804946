//go:build e2e

package e2e

import (
	"context"
	"sync"
	"testing"
	"time"
)

// pollWatch checks an invariant in the background, every interval, until
// stopped, and keeps the polls that found it broken: the watches a test
// runs across a disruption (a backlog, an upgrade) and checks at the end.
//
// What it covers is bracketed, not counted: its first poll runs before
// startPollWatch returns, so before whatever the caller then starts, and
// check polls once more after the caller is done. A count of polls would
// say how fast the work went (CI's DRA burst bound its 33 pods within 9
// polls of 100 ms on a slow machine), not whether the watch saw it.
type pollWatch struct {
	poll func(context.Context) (string, bool)
	ctx  context.Context

	mu       sync.Mutex
	polls    int
	missed   int
	first    bool
	problems []string
	stop     context.CancelFunc
	done     chan struct{}
}

// startPollWatch calls poll at once, then every interval. poll says what is
// broken ("" if nothing) and whether it could look at all (a poll that
// could not is not counted).
func startPollWatch(ctx context.Context, every time.Duration, poll func(context.Context) (problem string, looked bool)) *pollWatch {
	wctx, cancel := context.WithCancel(ctx)
	w := &pollWatch{poll: poll, ctx: ctx, stop: cancel, done: make(chan struct{})}
	w.first = w.once(wctx)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			w.once(wctx)
		}
	}()
	return w
}

// once polls and records the result; it reports whether the poll looked.
func (w *pollWatch) once(ctx context.Context) bool {
	problem, looked := w.poll(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !looked {
		if ctx.Err() == nil {
			w.missed++
		}
		return false
	}
	w.polls++
	if problem != "" {
		w.problems = append(w.problems, time.Now().Format(time.RFC3339)+": "+problem)
	}
	return true
}

// check stops the watch, polls a last time, and fails the test, naming
// what, if any poll found the invariant broken, if the first or the last
// poll could not look, or if more polls failed to look than looked.
func (w *pollWatch) check(t *testing.T, what string) {
	t.Helper()
	w.stop()
	<-w.done
	last := w.once(w.ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.first:
		t.Errorf("%s: the first poll, before the work began, could not look", what)
	case !last:
		t.Errorf("%s: the last poll, after the work, could not look", what)
	case w.missed > w.polls:
		t.Errorf("%s: %d polls could not look, %d did", what, w.missed, w.polls)
	}
	if len(w.problems) > 0 {
		t.Errorf("%s: broken at %d of %d polls; first at %s", what, len(w.problems), w.polls, w.problems[0])
	}
}
