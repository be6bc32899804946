//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/soak"
)

// TestSoakShort is the short form of the soak (issue 30) in every
// scheduling mode: 200 nodes for two minutes of churn near capacity,
// every fault once, and the invariant checker at every second. It asserts
// the invariants, never a speed; make bench-e2e runs the long form.
func TestSoakShort(t *testing.T) {
	for _, mode := range []string{"extender", "native", "plugin"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testContext(t, 15*time.Minute)
			out := soakOutDir(t, mode)
			r, err := soak.Run(ctx, soak.Options{
				Mode: mode, Nodes: 200, Duration: 2 * time.Minute, Rate: 5, FaultsOnce: true,
				BinDir: plane.ToolDir(), CapscaleBin: capscaleBin, OutDir: out, Logf: t.Logf,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s", r.Summary())
			for _, inv := range soak.Invariants {
				if n := r.Counts[inv]; n > 0 {
					b, _ := os.ReadFile(filepath.Join(out, "violations.txt"))
					t.Errorf("%s: broken %d times:\n%s", inv, n, b)
				}
			}
			want := 4 // the extender, the adapter, the scheduler, kube-apiserver
			if mode == "plugin" {
				want = 3 // capscale-scheduler is the scheduler
			}
			if len(r.Faults) != want {
				t.Errorf("faults run: %v, want %d", r.Faults, want)
			}
			if r.Binds < 200 {
				t.Errorf("%d binds in the run: the churn did not churn", r.Binds)
			}
			// Every bind is an attempt; a few may fall in the scheduler's
			// restart, unread.
			if r.SchedulerAttempts < float64(r.Binds)/2 {
				t.Errorf("%.0f scheduling attempts read for %d binds: the sampler does not read kube-scheduler's /metrics", r.SchedulerAttempts, r.Binds)
			}
		})
	}
}

// soakOutDir is where a soak writes its samples, violations and the
// plane's logs: a new _output/e2e/soak-<mode>-* directory, removed again
// unless the test failed, so that a failure's logs stay to be read.
func soakOutDir(t *testing.T, mode string) string {
	t.Helper()
	parent, err := filepath.Abs(filepath.Join("..", "_output", "e2e"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(parent, "soak-"+mode+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the soak's samples, violations and logs are kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}
