//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// TestInstallScript runs hack/install.sh as a server dry run (a real install
// would route the aggregator to kwok pod IPs, which nothing may dial): the
// preflight passes on an empty cluster, the manifests make no certificate
// (the adapter does), and with another adapter registered the script refuses.
func TestInstallScript(t *testing.T) {
	p := startPlane(t, plane.Options{Nodes: 1})
	ctx := testContext(t, 2*time.Minute)
	if _, err := p.Kubectl(ctx, "apply", "-f", stack.DeployFile("namespace.yaml")); err != nil {
		t.Fatal(err)
	}
	rendered := filepath.Join(t.TempDir(), "capscale.yaml")
	install := func(env ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(plane.RepoRoot(), "hack", "install.sh"))
		cmd.Env = append(os.Environ(), append([]string{
			"KUBECONFIG=" + p.Kubeconfig, "KUBECTL=" + filepath.Join(p.Opts.BinDir, "kubectl"),
			"METRICS_ADAPTER=" + filepath.Join(capscaleBin, "metrics-adapter"),
			"DRY_RUN=server", "RENDER_TO=" + rendered,
		}, env...)...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	out, err := install()
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	if !strings.Contains(out, "not registered") || !strings.Contains(out, "apiservice.apiregistration.k8s.io/v1beta1.external.metrics.k8s.io created (server dry run)") {
		t.Errorf("install.sh output:\n%s", out)
	}
	// No certificate is made by the script: the adapter makes its own and
	// writes the caBundle, so the APIService is applied without one.
	b, err := os.ReadFile(rendered)
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?m)^  caBundle:`).Match(b) || !strings.Contains(string(b), "--serving-cert-secret=capscale-system/capscale-serving-cert") {
		t.Errorf("the applied manifests carry a caBundle, or the adapter does not make its certificate")
	}

	ac, err := aggregator.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	other := &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.external.metrics.k8s.io"},
		Spec: apiregv1.APIServiceSpec{
			Service: &apiregv1.ServiceReference{Namespace: "monitoring", Name: "prometheus-adapter", Port: ptr.To(int32(443))},
			Group:   "external.metrics.k8s.io", Version: "v1beta1",
			InsecureSkipTLSVerify: true, GroupPriorityMinimum: 100, VersionPriority: 100,
		},
	}
	if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := install(); err == nil || !strings.Contains(out, "monitoring/prometheus-adapter") || strings.Contains(out, "kubectl apply") && strings.Contains(out, "created") {
		t.Errorf("install.sh with prometheus-adapter registered: err=%v, want a refusal before anything is applied:\n%s", err, out)
	}
	if out, err := install("REPLACE=true"); err != nil || !strings.Contains(out, "take it over") {
		t.Errorf("install.sh REPLACE=true: %v\n%s", err, out)
	}

	// Delegation: prometheus-adapter is registered without a caBundle, so
	// capscale needs the CA that verifies it; then the owner is recorded
	// (a server dry run here: nothing changes).
	if out, err := install("DELEGATE=true"); err == nil || !strings.Contains(out, "--delegate-ca-file") {
		t.Errorf("install.sh DELEGATE=true for an owner without caBundle: err=%v, want a refusal naming --delegate-ca-file:\n%s", err, out)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, p.PKI.ClusterCA.CAData(), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = install("DELEGATE=true", "DELEGATE_CA_FILE="+caFile)
	if err != nil || !strings.Contains(out, "recorded monitoring/prometheus-adapter:443 as the delegate") || !strings.Contains(out, "server dry run") {
		t.Errorf("install.sh DELEGATE=true DELEGATE_CA_FILE: %v\n%s", err, out)
	}
	got, err := ac.ApiregistrationV1().APIServices().Get(ctx, other.Name, metav1.GetOptions{})
	if err != nil || len(got.Annotations) != 0 || got.Spec.Service.Name != "prometheus-adapter" {
		t.Errorf("a dry run changed the APIService: %+v %v", got, err)
	}

	// Uninstalling (dry run) keeps an APIService capscale does not own.
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(plane.RepoRoot(), "hack", "uninstall.sh"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+p.Kubeconfig, "KUBECTL="+filepath.Join(p.Opts.BinDir, "kubectl"),
		"METRICS_ADAPTER="+filepath.Join(capscaleBin, "metrics-adapter"), "DRY_RUN=server")
	b, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "nothing to restore") || !strings.Contains(string(b), "keeping it") || strings.Contains(string(b), "apiservice.apiregistration.k8s.io") {
		t.Errorf("uninstall.sh DRY_RUN=server: %v\n%s", err, b)
	}
}
