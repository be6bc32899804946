package soak

import (
	"context"
	"sync"
	"time"

	"github.com/capscale/capscale/e2e/stack"
)

// faults SIGKILLs and restarts each capscale process, one at a time, kills
// the scheduler, and restarts kube-apiserver once, naming the fault in
// progress for the samples.
type faults struct {
	s    *stack.Stack
	mode string
	logf func(string, ...any)

	mu   sync.Mutex
	now  string
	done []string
}

func (f *faults) current() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

type fault struct {
	name string
	do   func(ctx context.Context) error
}

func (f *faults) list() []fault {
	s := f.s
	var out []fault
	if f.mode != "plugin" {
		out = append(out, fault{"kill extender", func(ctx context.Context) error {
			s.KillExtender()
			time.Sleep(2 * time.Second)
			return s.StartExtender(ctx)
		}})
	}
	out = append(out,
		fault{"kill metrics-adapter", func(ctx context.Context) error {
			s.KillAdapter(0)
			time.Sleep(2 * time.Second)
			return s.RestartAdapter(ctx, 0)
		}},
		fault{"kill the scheduler", func(ctx context.Context) error { return s.KillScheduler(ctx) }},
		fault{"restart kube-apiserver", func(ctx context.Context) error {
			if err := s.Halt("kube-apiserver", 5*time.Second); err != nil {
				return err
			}
			return s.Resume(ctx, "kube-apiserver")
		}},
	)
	return out
}

// run runs every fault once: spread over the whole run (once), or over
// its first half, so that the second half's growth fit sees no restart.
func (f *faults) run(ctx context.Context, d time.Duration, once bool) {
	list := f.list()
	span := d / 2
	if once {
		span = d * 8 / 10
	}
	gap := span / time.Duration(len(list)+1)
	for _, ft := range list {
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		f.mu.Lock()
		f.now = ft.name
		f.mu.Unlock()
		f.logf("soak: fault: %s", ft.name)
		err := ft.do(context.WithoutCancel(ctx))
		f.mu.Lock()
		f.now = ""
		f.done = append(f.done, ft.name)
		f.mu.Unlock()
		if err != nil {
			f.logf("soak: fault %s: %v", ft.name, err)
		}
	}
}
