//go:build e2e

package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// TestDeployManifests: the apiserver accepts everything in deploy/ (server
// dry-run of `kubectl apply -k deploy/`), and the install preflight refuses
// to take the external-metrics APIService from another adapter.
func TestDeployManifests(t *testing.T) {
	p := startPlane(t, plane.Options{Nodes: 1})
	ctx := testContext(t, 2*time.Minute)
	if _, err := p.Kubectl(ctx, "apply", "-f", stack.DeployFile("namespace.yaml")); err != nil {
		t.Fatal(err)
	}
	out, err := p.Kubectl(ctx, "apply", "-k", filepath.Join(plane.RepoRoot(), "deploy"), "--dry-run=server")
	if err != nil {
		t.Fatalf("server dry-run of deploy/: %v", err)
	}
	for _, want := range []string{"deployment.apps/capscale-metrics-adapter", "deployment.apps/capscale-scheduler", "apiservice.apiregistration.k8s.io/v1beta1.external.metrics.k8s.io"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry-run output lacks %s:\n%s", want, out)
		}
	}

	preflight := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(capscaleBin, "metrics-adapter"), append([]string{"preflight", "--kubeconfig=" + p.Kubeconfig}, args...)...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	if out, err := preflight(); err != nil || !strings.Contains(out, "not registered") {
		t.Errorf("preflight on an empty cluster: %v\n%s", err, out)
	}
	ac, err := aggregator.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	keda := &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.external.metrics.k8s.io"},
		Spec: apiregv1.APIServiceSpec{
			Service: &apiregv1.ServiceReference{Namespace: "keda", Name: "keda-operator-metrics-apiserver", Port: ptr.To(int32(443))},
			Group:   "external.metrics.k8s.io", Version: "v1beta1",
			InsecureSkipTLSVerify: true, GroupPriorityMinimum: 100, VersionPriority: 100,
		},
	}
	if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, keda, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := preflight(); err == nil || !strings.Contains(out, "keda/keda-operator-metrics-apiserver") || !strings.Contains(out, "--replace") {
		t.Errorf("preflight with KEDA installed: err=%v, want a refusal naming KEDA's Service and --replace:\n%s", err, out)
	}
	if out, err := preflight("--replace"); err != nil || !strings.Contains(out, "take it over") {
		t.Errorf("preflight --replace: %v\n%s", err, out)
	}
}
