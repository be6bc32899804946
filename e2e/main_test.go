//go:build e2e

// Package e2e runs capscale against a real control plane on 127.0.0.1 (see
// package plane). Run with `make e2e`; the control-plane binaries come from
// `make control-plane`.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capscale/capscale/e2e/plane"
)

// capscaleBin holds capscale's own binaries, built once by TestMain.
var capscaleBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "capscale-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	capscaleBin = dir
	// make e2e runs two test processes at once: one compiles, the other
	// waits and links from Go's build cache.
	unlock, err := buildLock()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer unlock()
	// custom-metrics-apiserver's test-adapter is the other external-metrics
	// server of the delegation tests, built from the module capscale uses.
	// -trimpath as make build and make image: the same compiled packages.
	cmd := exec.Command("go", "build", "-trimpath", "-o", dir+string(filepath.Separator), "./cmd/...", "sigs.k8s.io/custom-metrics-apiserver/test-adapter")
	cmd.Dir = plane.RepoRoot()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building capscale binaries:", err)
		return 1
	}
	// The compatibility matrix (make test-compat) gives capscale-scheduler
	// built for the plane's minor (e2e/tools/k8s-1.MINOR).
	if bin := os.Getenv("CAPSCALE_SCHEDULER_BIN"); bin != "" {
		if err := os.Symlink(bin, filepath.Join(dir, "capscale-scheduler")); err != nil {
			fmt.Fprintln(os.Stderr, "CAPSCALE_SCHEDULER_BIN:", err)
			return 1
		}
		unlock()
		return m.Run()
	}
	// capscale-scheduler is its own module; with make build's flags Go
	// takes kube-scheduler's compiled packages from its build cache.
	cmd = exec.Command("go", "build", "-trimpath", "-o", dir+string(filepath.Separator), ".")
	cmd.Dir = filepath.Join(plane.RepoRoot(), "cmd", "capscale-scheduler")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building capscale-scheduler:", err)
		return 1
	}
	unlock()
	// The real-node tests need root and make deps' packages; without them
	// each fails, saying so. Say it once up front too, not as a skip.
	if err := plane.CheckRealNodeHost(plane.ToolDir()); err != nil {
		fmt.Fprintf(os.Stderr, "the real-node tests (e2e/realnode_*_test.go) will FAIL on this host: %v\n", err)
	}
	return m.Run()
}

// startPlane brings a plane up for one test and tears it down after, printing
// every component's log tail if the test failed.
func startPlane(t *testing.T, o plane.Options) *plane.Plane {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o.Logf = t.Logf
	p, err := plane.Start(ctx, o)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs:\n%s", p.LogTails(60))
		}
		p.Stop()
	})
	return p
}

// testContext is a context bounded by the test's deadline.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// buildLock takes an exclusive lock shared by every e2e process of this
// machine; the returned func releases it and may be called twice.
func buildLock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "capscale-e2e-build.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("the build lock: %w", err)
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, nil
}
