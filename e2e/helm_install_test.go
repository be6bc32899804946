//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// capscaleNamespace is the release's namespace in the helm tests (helm -n),
// where the processes' stack keeps capscale too.
const capscaleNamespace = stack.Namespace

// TestHelmInstallOwnerCheck (issue 44): the chart's in-cluster preflight.
// With another adapter owning the external-metrics APIService, `helm
// install` fails with a message naming it and the ways on, and applies
// nothing; with apiService.delegate=true it installs without the
// APIService and the adapter is told to take it over; on an empty cluster
// it installs the APIService without a caBundle (the adapter writes it).
// Objects only: kwok nodes run no container.
func TestHelmInstallOwnerCheck(t *testing.T) {
	p := startPlane(t, plane.Options{Nodes: 1})
	ctx := testContext(t, 3*time.Minute)
	helm := helmCommand(ctx, t, p)
	ac, err := aggregator.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	keda := otherAdapterAPIService("keda", "keda-operator-metrics-apiserver", p.PKI.ClusterCA.CAData())
	if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, keda, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join("deploy", "helm", "capscale")

	out, err := helm("install", "capscale", chart, "--create-namespace", "--set", "extender.mode=native")
	if err == nil || !strings.Contains(out, "served by keda/keda-operator-metrics-apiserver, not capscale") ||
		!strings.Contains(out, "apiService.delegate=true") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("helm install over KEDA's APIService: err=%v, want the refusal naming it:\n%s", err, out)
	}
	if _, err := p.Client.CoreV1().Namespaces().Get(ctx, "capscale-system", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused install created the namespace (err=%v)", err)
	}
	if got, _ := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{}); got.Spec.Service.Name != "keda-operator-metrics-apiserver" {
		t.Errorf("the refused install changed the APIService: %+v", got.Spec.Service)
	}
	t.Logf("refusal:\n%s", out)

	out, err = helm("install", "capscale", chart, "--create-namespace", "--set", "extender.mode=native", "--set", "apiService.delegate=true")
	if err != nil {
		t.Fatalf("helm install --set apiService.delegate=true: %v\n%s", err, out)
	}
	d, err := p.Client.AppsV1().Deployments("capscale-system").Get(ctx, "capscale-metrics-adapter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(d.Spec.Template.Spec.Containers[0].Command, " "), "--delegate-existing-owner") {
		t.Errorf("the adapter is not told to take the APIService over: %v", d.Spec.Template.Spec.Containers[0].Command)
	}
	if got, _ := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{}); got.Spec.Service.Name != "keda-operator-metrics-apiserver" {
		t.Errorf("helm took the APIService over itself: %+v", got.Spec.Service)
	}
	// helm install sees the cluster: its uninstall hook gives the APIService
	// back (helm template leaves the hook out; deploy/'s render tests).
	if out, err := helm("get", "hooks", "capscale"); err != nil || !strings.Contains(out, "name: capscale-apiservice-restore") ||
		!strings.Contains(out, "--restore") {
		t.Errorf("the release has no restore hook: %v\n%s", err, out)
	}
	// KEDA's stand-in goes before the uninstall: no server answers for it,
	// and while it is registered discovery stays incomplete, so that
	// kube-controller-manager cannot finish deleting the release's objects
	// and the uninstall's --wait would wait in vain.
	if err := ac.ApiregistrationV1().APIServices().Delete(ctx, externalMetricsAPIService, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := helm("uninstall", "capscale", "--no-hooks", "--wait", "--timeout", "90s"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}

	// Nobody owns it: the chart installs it, without a caBundle.
	if out, err := helm("install", "capscale2", chart, "--create-namespace", "--set", "extender.mode=plugin"); err != nil {
		t.Fatalf("helm install on an empty cluster: %v\n%s", err, out)
	}
	got, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{})
	if err != nil || got.Spec.Service.Name != "capscale-metrics-adapter" || len(got.Spec.CABundle) != 0 {
		t.Errorf("APIService after install: %v %+v", err, got)
	}
	// An upgrade keeps it (the release's own).
	if out, err := helm("upgrade", "capscale2", chart, "--set", "extender.mode=native"); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
}

// otherAdapterAPIService is the external-metrics APIService as another
// adapter registers it: its Service ns/name on 443, its CA.
func otherAdapterAPIService(ns, name string, ca []byte) *apiregv1.APIService {
	return &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: externalMetricsAPIService},
		Spec: apiregv1.APIServiceSpec{
			Service: &apiregv1.ServiceReference{Namespace: ns, Name: name, Port: ptr.To(int32(443))},
			Group:   "external.metrics.k8s.io", Version: "v1beta1", CABundle: ca,
			GroupPriorityMinimum: 100, VersionPriority: 100,
		},
	}
}

// helmCommand runs CAPSCALE_BIN_DIR's helm against p as its admin, from
// the repository's root (a chart path is relative to it), with Helm's
// cache, configuration and data in the test's own directories, in the
// namespace capscale-system (HELM_NAMESPACE, helm's own -n default): the
// release's namespace is capscale's. Installs add --create-namespace, as
// an operator does.
func helmCommand(ctx context.Context, t *testing.T, p *plane.Plane) func(args ...string) (string, error) {
	t.Helper()
	bin := toolBin(t, "helm")
	home := t.TempDir()
	return func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", p.Kubeconfig)...)
		cmd.Dir = plane.RepoRoot()
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"),
			"HELM_NAMESPACE="+capscaleNamespace)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
}
