//go:build e2e

package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestAdapterServesThroughItsShutdownDelay: with --shutdown-delay-duration
// (the chart's 10 s), the adapter keeps answering the aggregator after
// SIGTERM for the delay, so that a rolling update's old pod fails no HPA
// read sent to it before its endpoint is gone (TestRealNodeHelmInstall saw
// one such read fail under load), and then exits by itself.
func TestAdapterServesThroughItsShutdownDelay(t *testing.T) {
	const delay = 4 * time.Second
	s, src := startAdapterStack(t, 0.5, func(o *stack.Options) {
		o.AdapterArgs = append(o.AdapterArgs, "--shutdown-delay-duration="+delay.String())
	})
	ctx := testContext(t, 3*time.Minute)
	src.Set(0.5)
	read := func(ctx context.Context) error {
		_, err := externalMetric(ctx, s, names.LoadIndexMetric, "source=gpu-load")
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return read(ctx) == nil, nil
	}); err != nil {
		t.Fatalf("the load index before SIGTERM: %v", err)
	}

	if err := syscall.Kill(s.Adapter.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	// Every read within the delay, less a margin for this loaded machine,
	// is answered.
	reads := 0
	for time.Since(sent) < delay-time.Second {
		if err := read(ctx); err != nil {
			t.Fatalf("read %d, %s after SIGTERM: %v; want answers for the %s delay", reads+1, time.Since(sent).Round(time.Millisecond), err, delay)
		}
		reads++
		time.Sleep(100 * time.Millisecond)
	}
	if exited, _ := s.Adapter.Exited(); exited {
		t.Fatalf("the adapter exited %s after SIGTERM, within its %s delay", time.Since(sent).Round(time.Millisecond), delay)
	}
	// Then it stops by itself, well within a pod's 30 s grace period.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		exited, _ := s.Adapter.Exited()
		return exited, nil
	}); err != nil {
		t.Fatalf("the adapter still runs %s after SIGTERM", time.Since(sent).Round(time.Second))
	}
	t.Logf("%d reads answered in the %s after SIGTERM; exited %s after it", reads, delay-time.Second, time.Since(sent).Round(100*time.Millisecond))
}
