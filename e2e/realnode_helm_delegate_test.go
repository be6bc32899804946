//go:build e2e

package e2e

// TestRealNodeHelmInstall's delegation install: custom-metrics-apiserver's
// test-adapter as a pod owns the external-metrics APIService first.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/capscale/capscale/e2e/nodeimage"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// testAdapterImage is custom-metrics-apiserver's test-adapter as an image
// of the real nodes (the delegation install's other adapter).
const testAdapterImage = "capscale.local/test-adapter:1"

// testAdapterArchive builds the test-adapter static (a pod has no libc of
// the host) and wraps it as testAdapterImage.
func testAdapterArchive(ctx context.Context, t *testing.T, dir string) nodeimage.Image {
	t.Helper()
	bin := filepath.Join(dir, "test-adapter")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "sigs.k8s.io/custom-metrics-apiserver/test-adapter")
	cmd.Dir = plane.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the test-adapter: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	im := nodeimage.Image{Ref: testAdapterImage, Tarball: bin + ".tar"}
	if err := nodeimage.WriteDockerArchive(im.Tarball, im.Ref, "test-adapter", b); err != nil {
		t.Fatal(err)
	}
	return im
}

// delegateNS and the test-adapter's Service, for the delegation install.
const helmDelegateNS = "other-adapter"

// startDelegatePod runs custom-metrics-apiserver's test-adapter (built
// static, imported on the nodes as capscale.local/test-adapter:1) as a pod
// on the system node, as its own ServiceAccount, serving a certificate of
// the cluster CA for its Service, and makes it the owner of the
// external-metrics APIService: another adapter, installed before capscale.
func startDelegatePod(ctx context.Context, t *testing.T, p *plane.Plane, system string) {
	t.Helper()
	if err := p.WaitForNamespace(ctx, helmDelegateNS); err != nil {
		t.Fatal(err)
	}
	rbac := filepath.Join(t.TempDir(), "rbac.yaml")
	if err := os.WriteFile(rbac, []byte(stack.TestAdapterRBAC(helmDelegateNS)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := p.Kubectl(ctx, "apply", "-f", rbac); err != nil {
		t.Fatalf("the test-adapter's RBAC: %v\n%s", err, out)
	}
	cert, err := p.ServingCert("test-adapter-pod", "test-adapter."+helmDelegateNS+".svc")
	if err != nil {
		t.Fatal(err)
	}
	crt, err := os.ReadFile(cert.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(cert.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: helmDelegateNS, Name: "test-adapter-tls"},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": crt, "tls.key": key}}
	if _, err := p.Client.CoreV1().Secrets(helmDelegateNS).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "test-adapter"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: helmDelegateNS, Name: "test-adapter", Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:           system,
			ServiceAccountName: "test-adapter",
			Containers: []corev1.Container{{
				Name: "test-adapter", Image: testAdapterImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/test-adapter", "--secure-port=6443",
					"--tls-cert-file=/tls/tls.crt", "--tls-private-key-file=/tls/tls.key"},
				VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: sec.Name}}}},
		},
	}
	if _, err := p.Client.CoreV1().Pods(helmDelegateNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: helmDelegateNS, Name: "test-adapter"},
		Spec: corev1.ServiceSpec{Selector: labels,
			Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(6443)}}},
	}
	if _, err := p.Client.CoreV1().Services(helmDelegateNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ac, err := aggregator.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, otherAdapterAPIService(helmDelegateNS, "test-adapter", p.PKI.ClusterCA.CAData()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAPIServiceAvailable(ctx, t, ac, helmDelegateNS+"/test-adapter")
}

// waitAPIServiceAvailable waits until the external-metrics APIService
// routes to service (namespace/name) and is Available.
func waitAPIServiceAvailable(ctx context.Context, t *testing.T, ac aggregator.Interface, service string) *apiregv1.APIService {
	t.Helper()
	var last string
	var got *apiregv1.APIService
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		svc, _, available, msg := apiServiceState(ctx, t, ac)
		last = fmt.Sprintf("service %s, available %v: %s", svc, available, msg)
		if svc != service || !available {
			return false, nil
		}
		a, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{})
		got = a
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the APIService never routed to %s and Available: %v; last: %s", service, err, last)
	}
	return got
}

// testDelegateInstall: with the test-adapter owning the APIService, `helm
// install --set apiService.delegate=true` takes it over (the adapter
// records the owner): the delegate's metric is answered through capscale,
// capscale's own too; `helm uninstall` gives the APIService back to the
// delegate exactly as it was (its pre-delete hook, a Job on a real node),
// Available again, and capscale's pods go (its namespace stays: the
// operator's, not the release's).
func testDelegateInstall(ctx context.Context, t *testing.T, p *plane.Plane, helm func(...string) (string, error), install []string, system string) {
	ac, err := aggregator.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	startDelegatePod(ctx, t, p, system)
	original, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := helm(append(install, "--set", "apiService.delegate=true")...); err != nil {
		t.Fatalf("helm install --set apiService.delegate=true: %v\n%s\n%s", err, out, namespaceState(ctx, p, "capscale-system"))
	}
	waitAPIServiceAvailable(ctx, t, ac, "capscale-system/capscale-metrics-adapter")
	s := &stack.Stack{Plane: p}
	var got string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		theirs, err1 := externalMetric(ctx, s, "my-external-metric", "foo=bar")
		ours, err2 := externalMetric(ctx, s, names.LoadIndexMetric, "source=web-load")
		got = fmt.Sprintf("%v %v / %v %v", theirs, err1, ours, err2)
		return err1 == nil && err2 == nil && len(theirs.Items) == 1 && theirs.Items[0].Value.Value() == 42 && len(ours.Items) == 1, nil
	})
	if err != nil {
		t.Fatalf("through capscale, the delegate's my-external-metric{foo=bar} (42) and capscale's own: %v; last %s", err, got)
	}

	if out, err := helm("uninstall", "capscale", "--wait", "--timeout", helmWait); err != nil {
		t.Fatalf("helm uninstall: %v\n%s\n%s", err, out, namespaceState(ctx, p, "capscale-system"))
	}
	back := waitAPIServiceAvailable(ctx, t, ac, helmDelegateNS+"/test-adapter")
	if back.Spec.Service.Namespace != original.Spec.Service.Namespace || *back.Spec.Service.Port != *original.Spec.Service.Port ||
		string(back.Spec.CABundle) != string(original.Spec.CABundle) || back.Spec.InsecureSkipTLSVerify ||
		back.Spec.GroupPriorityMinimum != original.Spec.GroupPriorityMinimum || back.Spec.VersionPriority != original.Spec.VersionPriority {
		t.Errorf("after helm uninstall the APIService is %+v, want the delegate's as it was: %+v", back.Spec, original.Spec)
	}
	waitReleaseGone(ctx, t, p)
	if theirs, err := externalMetric(ctx, s, "my-external-metric", "foo=bar"); err != nil || len(theirs.Items) != 1 {
		t.Errorf("the delegate's metric after the uninstall: %v %v", theirs, err)
	}
}
