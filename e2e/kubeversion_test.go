//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/capscale/capscale/e2e/plane"
)

// planeKubernetes is the Kubernetes version of the plane's binaries
// (CAPSCALE_BIN_DIR's kube-scheduler --version: v1.37.2 for make e2e,
// an older minor's under make test-compat) and its minor, "1.37".
func planeKubernetes(ctx context.Context, t *testing.T) (version, minor string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, toolBin(t, "kube-scheduler"), "--version").Output()
	if err != nil {
		t.Fatalf("kube-scheduler --version (make control-plane): %v", err)
	}
	m := regexp.MustCompile(`^Kubernetes (v(1\.[0-9]+)\.[0-9]+\S*)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("kube-scheduler --version says %q, want Kubernetes vX.Y.Z", out)
	}
	return string(m[1]), string(m[2])
}

// schedulerMinors is make image's SCHEDULER_MINORS for a plane of minor:
// that minor when capscale-scheduler is built for it from its own tool
// module (e2e/tools/k8s-MINOR, an older minor), else none (the repo's).
func schedulerMinors(minor string) string {
	if _, err := os.Stat(filepath.Join(plane.RepoRoot(), "e2e", "tools", "k8s-"+minor, "go.mod")); err != nil {
		return ""
	}
	return minor
}

// admissionPolicyServed is the version of admissionregistration.k8s.io
// that serves MutatingAdmissionPolicy on p ("v1", "v1beta1", "v1alpha1"),
// or "none".
func admissionPolicyServed(p *plane.Plane) string {
	for _, v := range []string{"v1", "v1beta1", "v1alpha1"} {
		list, err := p.Client.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/" + v)
		if err != nil {
			continue // a group version not served at all
		}
		for _, r := range list.APIResources {
			if r.Name == "mutatingadmissionpolicies" {
				return v
			}
		}
	}
	return "none"
}
