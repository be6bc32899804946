//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
)

// capscale's image and chart for a test, made the way make image and make
// release make them: the make targets themselves, pushing to
// go-containerregistry's registry as hack/oci serves it.

// registryServing is what `oci registry` prints once it listens.
var registryServing = regexp.MustCompile(`registry serving on http://(\S+)`)

// startRegistry builds hack/oci and runs `oci registry` on an ephemeral
// port of 127.0.0.1, stopped when the test ends; it returns host:port.
func startRegistry(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "oci")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(plane.RepoRoot(), "hack", "oci")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building hack/oci: %v\n%s", err, out)
	}
	logFile := filepath.Join(dir, "registry.log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, "registry", "--addr", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the registry: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			// Its last lines: every pull logs a line a request.
			b, _ := os.ReadFile(logFile)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("registry log, the last %d of %d lines:\n%s", min(len(lines), 40), len(lines), strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	var addr string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("the registry exited: %v", err)
		default:
		}
		b, _ := os.ReadFile(logFile)
		if m := registryServing.FindSubmatch(b); m != nil {
			addr = string(m[1])
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		b, _ := os.ReadFile(logFile)
		t.Fatalf("waiting for the registry: %v\n%s", err, b)
	}
	return addr
}

// makeImage runs `make image` for linux/amd64 with version, into dir,
// pushed to registry, and returns the digest of the image index pushed.
// On an older minor's plane the image holds that minor's
// capscale-scheduler too, as make release's does.
func makeImage(ctx context.Context, t *testing.T, dir, registry, version string) string {
	t.Helper()
	_, minor := planeKubernetes(ctx, t)
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "image",
		"IMAGE_PLATFORMS=linux/amd64", "OUT="+filepath.Join(dir, "out"), "IMAGE_OUT="+filepath.Join(dir, "image"),
		"VERSION="+version, "REGISTRY="+registry, "SCHEDULER_MINORS="+schedulerMinors(minor))
	cmd.Dir = plane.RepoRoot()
	// Not make e2e's flags or jobserver: this make is its own.
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	// hack/oci push: "pushed REGISTRY/capscale:VERSION (sha256:...)".
	m := regexp.MustCompile(`(?m)^pushed ` + regexp.QuoteMeta(registry+"/capscale:"+version) + ` \((sha256:[0-9a-f]{64})\)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("make image did not say what it pushed:\n%s", out)
	}
	return string(m[1])
}

// pushChart runs `make release-chart` for version with REGISTRY=registry
// (the Helm chart packaged and pushed beside the image, as make release
// does) and returns the image the pushed chart deploys: its values'
// image.repository and its appVersion, read back from the registry.
func pushChart(ctx context.Context, t *testing.T, dir, registry, version string) string {
	t.Helper()
	out := filepath.Join(dir, "out")
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "release-chart",
		"OUT="+out, "RELEASE_VERSION="+version, "REGISTRY="+registry)
	cmd.Dir = plane.RepoRoot()
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release-chart: %v\n%s", err, b)
	}
	show := func(what string) map[string]any {
		t.Helper()
		b, err := exec.CommandContext(ctx, filepath.Join(out, "bin", "helm"), "show", what,
			"oci://"+registry+"/charts/capscale", "--version", strings.TrimPrefix(version, "v"), "--plain-http").Output()
		if err != nil {
			t.Fatalf("helm show %s from %s: %v", what, registry, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatalf("helm show %s: %v\n%s", what, err, b)
		}
		return m
	}
	image, _ := show("values")["image"].(map[string]any)
	return fmt.Sprintf("%v:%v", image["repository"], show("chart")["appVersion"])
}

// registryDigest is the digest the registry serves for repo:tag.
func registryDigest(ctx context.Context, t *testing.T, registry, repo, tag string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+registry+"/v2/"+repo+"/manifests/"+tag, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("asking the registry for %s:%s: %v", repo, tag, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the registry answers %s for %s:%s", resp.Status, repo, tag)
	}
	return resp.Header.Get("Docker-Content-Digest")
}
