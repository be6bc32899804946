//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capscale/capscale/e2e/plane"
)

// TestRealNodeLocalUpDown is `make local-up REAL_NODES=2` then `make
// local-down`: the env file names the real nodes and their image, a pod of
// that image runs on one, and after down nothing of the nodes is left on
// the host (local-down fails otherwise: the footprint's check) and no
// footprint stays registered.
func TestRealNodeLocalUpDown(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	lp := localPlaneUp(ctx, t, "--nodes", "1", "--real-nodes", "2", "--real-node-capacity", "3")
	out, bin := lp.dir, lp.bin
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
	lp := &localPlane{dir: t.TempDir(), bin: localPlaneBinDir(ctx, t)}
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
