//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
)

// TestRealNodeLocalUpDown is `make local-up REAL_NODES=2` then `make
// local-down`: the env file names the real nodes and their image, a pod of
// that image runs on one, and after down nothing of the nodes is left on
// the host (local-down fails otherwise: the footprint's check) and no
// footprint stays registered. Then `make local-up REAL_NODES=2
// IPAM=whereabouts` (issue 57 §3): capscale-controller mirrors the node's
// capacity from whereabouts' NodeSlicePool (its slice's 6 IPs) and an
// underlay pod runs with an IP of that slice.
func TestRealNodeLocalUpDown(t *testing.T) {
	ctx := testContext(t, 6*time.Minute)
	bin := localPlaneBinDir(ctx, t)
	lp := localPlaneUpIn(ctx, t, bin, "--nodes", "1", "--real-nodes", "2", "--real-node-capacity", "3")
	out := lp.dir
	env, err := os.ReadFile(filepath.Join(out, "env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{`REAL_NODES="real-node-0 real-node-1"`, `REAL_NODE_IMAGE="` + plane.RealNodeImage + `"`, `REAL_NODE_CAPACITY="3"`} {
		if !strings.Contains(string(env), "export "+v) {
			t.Errorf("env file lacks %s:\n%s", v, env)
		}
	}
	var st struct {
		Footprint string `json:"realNodeFootprint"`
	}
	b, err := os.ReadFile(filepath.Join(out, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Footprint == "" {
		t.Fatalf("state.json names no footprint (%v):\n%s", err, b)
	}

	k := func(args ...string) (string, error) {
		b, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", filepath.Join(out, "kubeconfig")}, args...)...).CombinedOutput()
		return string(b), err
	}
	if o, err := k("get", "nodes", "real-node-1", "-o", "jsonpath={.metadata.labels.capscale\\.io/underlay-ip-capacity}"); err != nil || o != "3" {
		t.Errorf("real-node-1's capacity label: %q %v, want 3", o, err)
	}
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"hello","namespace":"default"},"spec":{
	  "nodeSelector":{"kubernetes.io/hostname":"real-node-1"},"automountServiceAccountToken":false,
	  "containers":[{"name":"web","image":"` + plane.RealNodeImage + `","imagePullPolicy":"Never"}]}}`
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "--kubeconfig", filepath.Join(out, "kubeconfig"), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(pod)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("creating a pod: %v\n%s", err, b)
	}
	var ip string
	for end := time.Now().Add(time.Minute); ip == "" && time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if o, err := k("get", "pod", "hello", "-o", "jsonpath={.status.phase} {.status.podIP}"); err == nil && strings.HasPrefix(o, "Running ") {
			ip = strings.TrimPrefix(o, "Running ")
		}
	}
	if ip == "" {
		o, _ := k("describe", "pod", "hello")
		t.Fatalf("the pod never ran on real-node-1:\n%s", o)
	}

	lp.down()
	if _, err := os.Stat(st.Footprint); !os.IsNotExist(err) {
		t.Errorf("footprint %s still registered after down: %v", st.Footprint, err)
	}
	if ms := grepFile(t, "/proc/self/mountinfo", filepath.Join(out, "plane")); len(ms) > 0 {
		t.Errorf("mounts left under the plane after down: %v", ms)
	}

	start := time.Now()
	wb := localPlaneUpIn(ctx, t, bin, "--nodes", "1", "--real-nodes", "2", "--ipam", "whereabouts", "--real-node-capacity", "6")
	kw := func(args ...string) (string, error) {
		b, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", filepath.Join(wb.dir, "kubeconfig")}, args...)...).CombinedOutput()
		return string(b), err
	}
	var got string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got, _ = kw("get", "node", "real-node-0", "-o", "jsonpath={.metadata.annotations.capscale\\.io/underlay-ip-source-capacity}")
		return got == "6", nil
	})
	if err != nil {
		t.Fatalf("real-node-0's capacity mirrored from whereabouts: %q, want 6 (%v)", got, err)
	}
	upod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"underlay","namespace":"default"},"spec":{
	  "nodeSelector":{"kubernetes.io/hostname":"real-node-0"},"automountServiceAccountToken":false,
	  "containers":[{"name":"web","image":"` + plane.RealNodeImage + `","imagePullPolicy":"Never",
	    "resources":{"limits":{"capscale.io/underlay-ip":"1"}}}]}}`
	cmd = exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "--kubeconfig", filepath.Join(wb.dir, "kubeconfig"), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(upod)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("creating an underlay pod: %v\n%s", err, b)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got, _ = kw("get", "pod", "underlay", "-o", "jsonpath={.status.phase} {.status.podIP}")
		return strings.HasPrefix(got, "Running "), nil
	})
	if err != nil {
		o, _ := kw("describe", "pod", "underlay")
		t.Fatalf("the underlay pod never ran with whereabouts' IP: %q %v\n%s", got, err, o)
	}
	if ip, err := netip.ParseAddr(strings.TrimPrefix(got, "Running ")); err != nil || !strings.Contains(envOf(t, wb.dir), `export IPAM="whereabouts"`) {
		t.Errorf("pod IP %q (%v), env file:\n%s", got, err, envOf(t, wb.dir))
	} else {
		t.Logf("local-up IPAM=whereabouts: capacity 6 mirrored from the NodeSlicePool, an underlay pod Running at %s, %.1fs after up began", ip, time.Since(start).Seconds())
	}
	wb.down()
}

func envOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// localPlane is a plane `localplane up` started in dir; the test's cleanup
// takes it down unless the test did (down).
type localPlane struct {
	dir, bin string
	run      func(args ...string) string
	down     func()
}

// localPlaneUp runs `localplane up` with this run's binaries and upArgs.
func localPlaneUp(ctx context.Context, t *testing.T, upArgs ...string) *localPlane {
	t.Helper()
	return localPlaneUpIn(ctx, t, localPlaneBinDir(ctx, t), upArgs...)
}

// localPlaneUpIn is localPlaneUp with the binaries of bin.
func localPlaneUpIn(ctx context.Context, t *testing.T, bin string, upArgs ...string) *localPlane {
	t.Helper()
	lp := &localPlane{dir: t.TempDir(), bin: bin}
	lp.run = func(args ...string) string {
		t.Helper()
		b, err := exec.CommandContext(ctx, filepath.Join(lp.bin, "localplane"), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("localplane %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	lp.run(append([]string{"up", "--dir", lp.dir, "--bin-dir", lp.bin}, upArgs...)...)
	downDone := false
	lp.down = func() { lp.run("down", "--dir", lp.dir); downDone = true }
	t.Cleanup(func() {
		if !downDone {
			lp.run("down", "--dir", lp.dir)
		}
	})
	return lp
}

// localPlaneBinDir is one directory with the control-plane and capscale
// binaries and localplane, as _output/bin is for make local-up.
func localPlaneBinDir(ctx context.Context, t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	planeBins := plane.ToolDir()
	// The binaries this run built first: the first link of a name wins.
	for _, dir := range []string{capscaleBin, planeBins} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			src, _ := filepath.EvalSymlinks(filepath.Join(dir, e.Name()))
			_ = os.Symlink(src, filepath.Join(bin, e.Name()))
		}
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "localplane"), "./e2e/cmd/localplane")
	build.Dir = plane.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building localplane: %v\n%s", err, out)
	}
	return bin
}

// grepFile returns the lines of path that contain s.
func grepFile(t *testing.T, path, s string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
