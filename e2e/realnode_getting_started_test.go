//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/internal/mdsteps"
)

// gettingStartedPage is the page TestRealNodeGettingStarted runs.
const gettingStartedPage = "docs/getting-started.md"

// makeLine is a make local-up or local-down line of the page.
var makeLine = regexp.MustCompile(`(?m)^make (local-up|local-down)((?: [A-Z_]+=\S+)*)$\n?`)

// TestRealNodeGettingStarted (issue 57 §1) runs docs/getting-started.md as
// written: each sh block in order, in one working directory, the exported
// variables carried from block to block as a reader's shell carries them,
// and each block's standard output matched against the text block the page
// shows after it (mdsteps.Match: ages, pod-name hashes, addresses, dates and
// column widths may differ; "..." stands for any lines). The page's `make
// local-up …` line is what that target runs, with this run's binaries in
// the test's own directory: `localplane up --chart` with the line's
// variables, then `make image` and `make release-chart` into the plane's
// registry (makeImage, pushChart); `make local-down` is `localplane down`.
// Any other make variable on the line fails the test, so the page cannot
// ask for what the test does not do.
func TestRealNodeGettingStarted(t *testing.T) {
	ctx := testContext(t, 20*time.Minute)
	page, err := os.ReadFile(filepath.Join(plane.RepoRoot(), gettingStartedPage))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := mdsteps.Parse(string(page))
	if err != nil {
		t.Fatalf("%s: %v", gettingStartedPage, err)
	}
	version, err := os.ReadFile(filepath.Join(plane.RepoRoot(), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	release := strings.TrimSpace(string(version))
	work := t.TempDir()
	state := filepath.Join(t.TempDir(), "exports")
	// sh runs a script as the page's reader would, in work, with the
	// variables the page's earlier blocks exported.
	sh := func(script string) (stdout, stderr string, err error) {
		cmd := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\nif [ -f \"$STATE\" ]; then source \"$STATE\"; fi\n"+script+"\nexport -p | grep '^declare -x ' > \"$STATE\"\n")
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "STATE="+state)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		return o.String(), e.String(), err
	}
	var lp *localPlane
	begin := time.Now()
	for i, st := range steps {
		script := st.Script
		for _, m := range makeLine.FindAllStringSubmatch(script, -1) {
			start := time.Now()
			switch m[1] {
			case "local-up":
				if lp != nil {
					t.Fatalf("%s:%d: a second make local-up", gettingStartedPage, st.Line)
				}
				lp = localUpChart(ctx, t, work, release, strings.Fields(m[2]))
			case "local-down":
				if lp == nil {
					t.Fatalf("%s:%d: make local-down before make local-up", gettingStartedPage, st.Line)
				}
				lp.down()
			}
			t.Logf("step %d (%s:%d): make %s%s in %.1fs", i+1, gettingStartedPage, st.Line, m[1], m[2], time.Since(start).Seconds())
		}
		script = makeLine.ReplaceAllString(script, "")
		if strings.TrimSpace(script) == "" {
			continue
		}
		start := time.Now()
		stdout, stderr, err := sh(script)
		t.Logf("step %d (%s:%d) in %.1fs:\n%s", i+1, gettingStartedPage, st.Line, time.Since(start).Seconds(), stdout)
		if err != nil {
			// On, as with a mismatch: the later steps say more. What the
			// pods of capscale's namespace logged (the kubelet's files:
			// kubectl logs does not reach a real node here).
			t.Errorf("step %d (%s:%d) failed: %v\n%s\nstderr:\n%s\n%s", i+1, gettingStartedPage, st.Line, err, script, stderr, podLogs(t, lp, "capscale-system_"))
			continue
		}
		if st.Expected != nil {
			if err := mdsteps.Match(st.Expected, strings.Split(stdout, "\n")); err != nil {
				// On: the next steps' outputs are worth seeing too.
				t.Errorf("step %d (%s:%d) printed other than the page shows: %v\nstderr:\n%s", i+1, gettingStartedPage, st.Line, err, stderr)
			}
		}
		if strings.Contains(script, "helm test ") {
			start := time.Now()
			checkHelmTestFails(t, sh, lp)
			t.Logf("helm test failing with the adapter down, and the adapter back: %.1fs", time.Since(start).Seconds())
		}
	}
	t.Logf("the page ran in %.1fs", time.Since(begin).Seconds())
}

// checkHelmTestFails: the page's helm test passed; with the metrics adapter
// scaled to nothing it fails, and its pod's log (the kubelet's file: helm
// test --logs, like kubectl logs, does not reach a real node here) says the
// external metric is what failed, the probe pod placed (capscale-scheduler
// still runs). The adapter then comes back, Available, for the rest of
// the page.
func checkHelmTestFails(t *testing.T, sh func(string) (string, string, error), lp *localPlane) {
	t.Helper()
	const adapter = "-n capscale-system deployment/capscale-metrics-adapter"
	if out, errOut, err := sh("kubectl scale " + adapter + " --replicas=0"); err != nil {
		t.Fatalf("scaling the adapter to 0: %v\n%s%s", err, out, errOut)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		out, _, err := sh("kubectl -n capscale-system get pods -l app.kubernetes.io/name=capscale-metrics-adapter -o name")
		return err == nil && strings.TrimSpace(out) == "", nil
	})
	if err != nil {
		t.Fatalf("the adapter's pods still there: %v", err)
	}
	out, errOut, err := sh("helm test capscale -n capscale-system --hide-notes")
	if err == nil {
		t.Fatalf("helm test passed with the metrics adapter down:\n%s", out)
	}
	logs := podLogs(t, lp, "capscale-system_capscale-test_")
	if !strings.Contains(errOut, "pod capscale-test failed") || !strings.Contains(logs, "scheduled on") ||
		!strings.Contains(logs, "error: reading external metric capscale-load-index{source=shop-load} in capscale-system") {
		t.Errorf("helm test failed, but not saying the probe pod was placed and the external metric could not be read:\n%s%s\n%s", out, errOut, logs)
	}
	t.Logf("helm test with the adapter down: %v\n%s\n%s", err, errOut, logs)
	if out, errOut, err := sh("kubectl scale " + adapter + " --replicas=2\n" +
		"kubectl wait " + adapter + " --for=jsonpath='{.status.availableReplicas}'=2 --timeout=2m\n" +
		"kubectl wait apiservice/v1beta1.external.metrics.k8s.io --for=condition=Available --timeout=2m"); err != nil {
		t.Fatalf("the adapter back: %v\n%s%s", err, out, errOut)
	}
}

// podLogs is the last lines of each container log the local plane's real
// nodes keep for pods whose directory name starts with prefix
// (NAMESPACE_POD_UID).
func podLogs(t *testing.T, lp *localPlane, prefix string) string {
	t.Helper()
	if lp == nil {
		return ""
	}
	var b strings.Builder
	_ = filepath.WalkDir(lp.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") || !strings.Contains(path, "/pod-logs/"+prefix) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "== %s (last %d of %d lines)\n%s\n", strings.TrimPrefix(path, lp.dir), min(len(lines), 15), len(lines), strings.Join(lines[max(0, len(lines)-15):], "\n"))
		return nil
	})
	return b.String()
}

// localUpChart is `make local-up CHART=1 VARS…` for the page, in work: the
// local plane's directory as work/_output/local, where the page's `source
// _output/local/env` finds it, and capscale's image and chart of release
// pushed to its registry as the target pushes them.
func localUpChart(ctx context.Context, t *testing.T, work, release string, vars []string) *localPlane {
	t.Helper()
	args := []string{"--chart", "--chart-version", strings.TrimPrefix(release, "v"), "--real-nodes", "3"}
	chart := false
	for _, v := range vars {
		k, val, _ := strings.Cut(v, "=")
		switch k {
		case "CHART":
			chart = val == "1"
		case "REAL_NODE_CAPACITY":
			args = append(args, "--real-node-capacity", val)
		case "REAL_NODES":
			args = append(args, "--real-nodes", val)
		default:
			t.Fatalf("%s: make local-up %s: the test does not run that variable", gettingStartedPage, v)
		}
	}
	if !chart {
		t.Fatalf("%s: make local-up without CHART=1: the page installs the chart", gettingStartedPage)
	}
	bin := localPlaneBinDir(ctx, t)
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "oci"), ".")
	build.Dir = filepath.Join(plane.RepoRoot(), "hack", "oci")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building hack/oci: %v\n%s", err, out)
	}
	lp := localPlaneUpIn(ctx, t, bin, args...)
	if err := os.MkdirAll(filepath.Join(work, "_output"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lp.dir, filepath.Join(work, "_output", "local")); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join(lp.dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^export REGISTRY="([^"]+)"$`).FindSubmatch(env)
	if m == nil {
		t.Fatalf("the env file names no REGISTRY:\n%s", env)
	}
	reg := string(m[1])
	out := filepath.Join(t.TempDir(), release)
	makeImage(ctx, t, out, reg, release)
	if got := pushChart(ctx, t, out, reg, release); got != reg+"/capscale:"+release {
		t.Fatalf("the chart %s names the image %s", release, got)
	}
	return lp
}
