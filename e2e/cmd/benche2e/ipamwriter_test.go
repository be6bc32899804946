package main

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Writes to one CiliumNode run one at a time, in the order their tickets
// were taken, whatever order their goroutines start in; other names do not wait.
func TestTicketLine(t *testing.T) {
	w := &ipamWriter{rv: map[string]string{}, tail: map[string]chan struct{}{}}
	ctx := context.Background()
	tickets := []ticket{w.line("a"), w.line("a"), w.line("a")}
	other := w.line("b")
	if err := other.wait(ctx); err != nil {
		t.Fatalf("another name waited: %v", err)
	}
	other.done()

	var (
		mu      sync.Mutex
		order   []int
		running int
		wg      sync.WaitGroup
	)
	for i := len(tickets) - 1; i >= 0; i-- { // started last to first
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := tickets[i]
			if err := tk.wait(ctx); err != nil {
				t.Error(err)
			}
			mu.Lock()
			running++
			if running > 1 {
				t.Errorf("write %d overlaps another write to the same name", i)
			}
			order = append(order, i)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			tk.done()
		}()
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Errorf("order %v, want [0 1 2]", order)
	}
	if len(w.tail) != 0 {
		t.Errorf("lines left behind: %v", w.tail)
	}

	blocked := w.line("c")
	next := w.line("c")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := next.wait(cancelled); err == nil {
		t.Error("a cancelled wait returned no error")
	}
	blocked.done()
	next.done()
}
