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
type pollWatch struct {
	mu       sync.Mutex
	polls    int
	problems []string
	stop     context.CancelFunc
	done     chan struct{}
}

// startPollWatch calls poll every interval. poll says what is broken ("" if
// nothing) and whether it could look at all (a poll that could not is not
// counted).
func startPollWatch(ctx context.Context, every time.Duration, poll func(context.Context) (problem string, looked bool)) *pollWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &pollWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if problem, looked := poll(ctx); looked {
				w.mu.Lock()
				w.polls++
				if problem != "" {
					w.problems = append(w.problems, time.Now().Format(time.RFC3339)+": "+problem)
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// check stops the watch and fails the test, naming what, if any poll found
// the invariant broken or fewer than minPolls looked.
func (w *pollWatch) check(t *testing.T, what string, minPolls int) {
	t.Helper()
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.polls < minPolls {
		t.Errorf("%s: only %d polls, want at least %d", what, w.polls, minPolls)
	}
	if len(w.problems) > 0 {
		t.Errorf("%s: broken at %d of %d polls; first at %s", what, len(w.problems), w.polls, w.problems[0])
	}
}
