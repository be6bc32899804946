//go:build e2e

package e2e

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capscale/capscale/e2e/stack"
)

// draKustomizeApplies: deploy/ with the component deploy/dra (extender
// mode, as deploy/kustomization.yaml's comment says to list it) renders
// with the plane's kubectl and kube-apiserver v1.37.2 accepts every object
// of it (kubectl apply --dry-run=server: admitted and validated, nothing
// stored, so the plane's own capscale stays as it is).
func draKustomizeApplies(ctx context.Context, t *testing.T, s *stack.Stack) {
	dir := t.TempDir()
	src := stack.DeployFile("")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			if rel == "helm" || rel == "examples" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o750)
		}
		if !strings.HasSuffix(path, ".yaml") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == "kustomization.yaml" {
			b = append(b, []byte("components:\n- dra\n")...)
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Kubectl(ctx, "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/ with dra: %v\n%s", err, out)
	}
	rendered := filepath.Join(t.TempDir(), "dra.yaml")
	if err := os.WriteFile(rendered, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := s.Kubectl(ctx, "apply", "--dry-run=server", "-f", rendered)
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server of deploy/ with dra: %v\n%s", err, res)
	}
	for _, want := range []string{
		"deviceclass.resource.k8s.io/underlay-ip.capscale.io",
		"daemonset.apps/capscale-dra-kubelet-plugin",
		"deployment.apps/capscale-scheduler",
	} {
		if !strings.Contains(res, want) {
			t.Errorf("the dry run does not list %s:\n%s", want, res)
		}
	}
}
