package main

import (
	"context"
	"sync"
	"sync/atomic"
)

// forEach runs fn(i) for i in [0, n) on workers goroutines and returns the
// first error; after an error no new call starts. done, if not nil, counts
// the calls that succeeded (for progress reports).
func forEach(ctx context.Context, n, workers int, done *atomic.Int64, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  atomic.Int64
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				if done != nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return first
}
