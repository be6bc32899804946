//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/capscale/capscale/e2e/stack"
)

// startStack brings up a stack with capscale's binaries, stopped when the
// test ends and with every component's log tail printed if it failed.
func startStack(t *testing.T, o stack.Options) *stack.Stack {
	t.Helper()
	ctx := testContext(t, 3*time.Minute)
	o.BinDir = capscaleBin
	s, err := stack.Start(ctx, o)
	if err != nil {
		t.Fatalf("starting stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs:\n%s", s.LogTails(80))
		}
		s.Stop()
	})
	return s
}
