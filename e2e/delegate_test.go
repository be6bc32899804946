//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

const (
	delegateNS      = "e2e-delegate"
	delegateService = "test-adapter"
	// delegateMetric is served by the test-adapter as 42 for foo=bar.
	delegateMetric = "my-external-metric"
)

// delegateHPA scales name on the delegate's metric: 42 / target replicas.
func delegateHPA(name string, target int64) *autoscalingv2.HorizontalPodAutoscaler {
	hpa := desiredReplicasHPA(name, names.PolicyQPS, 1, 10)
	hpa.Spec.Metrics[0].External.Metric.Name = delegateMetric
	hpa.Spec.Metrics[0].External.Metric.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"foo": "bar"}}
	hpa.Spec.Metrics[0].External.Target.AverageValue = resource.NewQuantity(target, resource.DecimalSI)
	return hpa
}

func setDelegateTarget(ctx context.Context, t *testing.T, s *stack.Stack, name string, target int64) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"metrics":[{"type":"External","external":{"metric":{"name":%q,"selector":{"matchLabels":{"foo":"bar"}}},"target":{"type":"AverageValue","averageValue":"%d"}}}]}}`, delegateMetric, target)
	if _, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func preflight(ctx context.Context, p *plane.Plane, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(capscaleBin, "metrics-adapter"), append([]string{"preflight", "--kubeconfig=" + p.Kubeconfig}, args...)...)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// createQPSWeb creates Deployment web (500 QPS a pod, 800 in all) and an
// HPA on capscale's QPS policy for it: 2 replicas.
func createQPSWeb(ctx context.Context, t *testing.T, s *stack.Stack) {
	t.Helper()
	web := SimpleDeployment(adapterNS, "web", 1, nil)
	web.Annotations = map[string]string{names.SinglePodQPSAnnotation: "500", names.TotalQPSAnnotation: "800"}
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Create(ctx, desiredReplicasHPA("web", names.PolicyQPS, 1, 10), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// uninstall runs hack/uninstall.sh against the plane, which must give the
// APIService back to the recorded delegate.
func uninstall(ctx context.Context, t *testing.T, s *stack.Stack) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(plane.RepoRoot(), "hack", "uninstall.sh"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.Kubeconfig, "KUBECTL="+filepath.Join(s.Plane.Opts.BinDir, "kubectl"),
		"METRICS_ADAPTER="+filepath.Join(capscaleBin, "metrics-adapter"))
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "restored:") {
		t.Fatalf("hack/uninstall.sh: %v\n%s", err, b)
	}
}

// adapterGet calls capscale's adapter directly: with a bearer token, or as
// admin (client certificate) when token is empty.
func adapterGet(ctx context.Context, s *stack.Stack, path, token string) (int, string, error) {
	return adapterGetAt(ctx, s, s.AdapterURL, path, token)
}

// adapterGetAt is adapterGet for the adapter (replica) at base.
func adapterGetAt(ctx context.Context, s *stack.Stack, base, path, token string) (int, string, error) {
	pem, err := os.ReadFile(s.PKI.ClusterCA.CertFile)
	if err != nil {
		return 0, "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if token == "" {
		cert, err := tls.LoadX509KeyPair(s.Config.CertFile, s.Config.KeyFile)
		if err != nil {
			return 0, "", err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// forwarded reads capscale_adapter_delegate_requests_total{code} from the
// adapter's /metrics.
func forwarded(ctx context.Context, t *testing.T, s *stack.Stack, code int) float64 {
	t.Helper()
	status, body, err := adapterGet(ctx, s, "/metrics", "")
	if err != nil || status != 200 {
		t.Fatalf("/metrics: %d %v", status, err)
	}
	m := regexp.MustCompile(`(?m)^capscale_adapter_delegate_requests_total\{code="` + strconv.Itoa(code) + `"\} (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func waitMetricValue(ctx context.Context, t *testing.T, s *stack.Stack, metric, selector string, want int64) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := externalMetric(ctx, s, metric, selector)
		if err != nil {
			if ctx.Err() == nil { // keep the server's answer, not the poll's deadline
				last = err
			}
			return false, nil
		}
		return len(l.Items) == 1 && l.Items[0].Value.Value() == want, nil
	})
	if err != nil {
		t.Fatalf("%s{%s} through the aggregator never became %d: %v (last error %v)", metric, selector, want, err, last)
	}
}

// TestAdapterDelegation (issue 10, part 1): another real external-metrics
// server owns the APIService with an HPA on its metric; capscale is
// installed in delegation mode; both HPAs keep scaling; stopping the
// delegate fails only its metric; uninstalling gives the APIService back.
func TestAdapterDelegation(t *testing.T) {
	ctx := testContext(t, 10*time.Minute)
	s := startStack(t, stack.Options{Plane: plane.Options{Nodes: 2, Logf: t.Logf, HPASyncPeriod: 2 * time.Second}})
	if err := s.WaitForNamespace(ctx, adapterNS); err != nil {
		t.Fatal(err)
	}
	_, apiService := externalMetricsAPIServiceOf(ctx, t, s.Config)

	// 1. The test-adapter owns the APIService; an HPA scales on its metric.
	ta, err := s.StartTestAdapter(ctx, stack.TestAdapterBin(capscaleBin), delegateNS, delegateService)
	if err != nil {
		t.Fatalf("starting the delegate: %v", err)
	}
	original := apiService().Spec
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Create(ctx, SimpleDeployment(adapterNS, "queue", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Create(ctx, delegateHPA("queue", 21), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, s, "queue", 2, time.Minute, nil, nil)

	// 2. Install capscale in delegation mode: record the owner, then route
	// the APIService to capscale (what hack/install.sh DELEGATE=true does).
	out, err := preflight(ctx, s.Plane, "--delegate")
	if err != nil || !strings.Contains(out, "recorded "+delegateNS+"/"+delegateService+":443 as the delegate") {
		t.Fatalf("preflight --delegate: %v\n%s", err, out)
	}
	if err := s.StartAdapter(ctx); err != nil {
		t.Fatalf("starting capscale's adapter: %v", err)
	}
	record := apiService().Annotations[names.DelegateAnnotation]
	if svc := apiService().Spec.Service; record == "" || svc.Namespace != stack.Namespace || svc.Name != stack.AdapterService {
		t.Fatalf("after install: APIService routes to %+v, record %q", svc, record)
	}
	// A re-run of the install never records capscale itself.
	if out, err := preflight(ctx, s.Plane, "--delegate"); err != nil || !strings.Contains(out, "delegates to "+delegateNS+"/"+delegateService) {
		t.Errorf("preflight --delegate re-run: %v\n%s", err, out)
	}
	if got := apiService().Annotations[names.DelegateAnnotation]; got != record {
		t.Errorf("a re-run changed the record:\n%s\n%s", record, got)
	}

	// The delegate's metric through the aggregator, forwarded by capscale;
	// discovery lists what both servers advertise.
	waitMetricValue(ctx, t, s, delegateMetric, "foo=bar", 42)
	if _, err := externalMetric(ctx, s, names.TotalQPSMetric, "workload=nope"); !apierrors.IsNotFound(err) {
		t.Errorf("capscale's own metric for a missing workload: %v, want capscale's 404", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		raw, err := s.Client.Discovery().RESTClient().Get().AbsPath("/apis/external.metrics.k8s.io/v1beta1").DoRaw(ctx)
		// The test-adapter advertises one generic name, as KEDA does.
		return err == nil && strings.Contains(string(raw), `"externalmetrics"`) &&
			strings.Contains(string(raw), `"`+names.DesiredReplicasMetric+`"`), nil
	})
	if err != nil {
		t.Errorf("discovery does not list both servers' metrics: %v", err)
	}

	// Both HPAs scale: the delegate's on a new target (42/14 = 3), capscale's
	// on QPS annotations (800/500 -> 2).
	setDelegateTarget(ctx, t, s, "queue", 14)
	createQPSWeb(ctx, t, s)
	waitReplicas(ctx, t, s, "queue", 3, time.Minute, nil, nil)
	waitReplicas(ctx, t, s, "web", 2, time.Minute, nil, nil)
	if n := forwarded(ctx, t, s, 200); n < 1 {
		t.Errorf("capscale_adapter_delegate_requests_total{code=200} = %v, want the forwarded requests counted", n)
	}

	// capscale authorizes the caller before forwarding: a ServiceAccount
	// without RBAC on external.metrics.k8s.io gets capscale's 403, and
	// nothing reaches the delegate.
	token, err := s.ServiceAccountToken(ctx, adapterNS, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	// The HPA controller reads the delegate's metric every 15 s, so a count
	// of forwarded requests moves on its own; the delegate's own request log
	// (httplog at -v=3) is read instead, for selectors no HPA asks for. The
	// authorized probe shows that a forwarded request does show there.
	probe := fmt.Sprintf("/apis/external.metrics.k8s.io/v1beta1/namespaces/%s/%s?labelSelector=probe%%3D", adapterNS, delegateMetric)
	code, body, err := adapterGet(ctx, s, probe+"nobody", token)
	if err != nil || code != http.StatusForbidden || !strings.Contains(body, "system:serviceaccount:"+adapterNS+":nobody") {
		t.Errorf("unauthorized caller: %d %v %s; want capscale's 403 naming the caller", code, err, body)
	}
	if code, body, err := adapterGet(ctx, s, probe+"admin", ""); err != nil || code >= 500 {
		t.Fatalf("authorized probe: %d %v %s", code, err, body)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		log, err := os.ReadFile(ta.Proc.LogFile)
		return err == nil && strings.Contains(string(log), "probe%3Dadmin"), nil
	})
	if err != nil {
		t.Fatalf("the authorized probe never reached the delegate's request log: %v\n%s", err, ta.Proc.Tail(20))
	}
	if log, err := os.ReadFile(ta.Proc.LogFile); err != nil || strings.Contains(string(log), "probe%3Dnobody") {
		t.Errorf("an unauthorized request was forwarded to the delegate (log read: %v)", err)
	}

	// 3. The delegate stops: its metric is a 503, its HPA holds; capscale's
	// metrics and HPA are unaffected.
	ta.Proc.Stop(5 * time.Second)
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := externalMetric(ctx, s, delegateMetric, "foo=bar")
		return apierrors.IsServiceUnavailable(err) && strings.Contains(err.Error(), "delegate "+delegateNS+"/"+delegateService), nil
	})
	if err != nil {
		_, last := externalMetric(ctx, s, delegateMetric, "foo=bar")
		t.Fatalf("with the delegate stopped its metric is not a 503 naming it: %v (last: %v)", err, last)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"1800"}}}`, names.TotalQPSAnnotation)
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, s, "web", 4, time.Minute, nil, nil)
	holdReplicas(ctx, t, s, "queue", 3, 8*time.Second)
	if n := forwarded(ctx, t, s, 503); n < 1 {
		t.Errorf("capscale_adapter_delegate_requests_total{code=503} = %v, want the failures counted", n)
	}

	// 4. Uninstall gives the APIService back exactly as it was, and the
	// delegate's HPA works through it (42/42 -> 1).
	if err := s.RestartTestAdapter(ctx, ta); err != nil {
		t.Fatal(err)
	}
	waitMetricValue(ctx, t, s, delegateMetric, "foo=bar", 42)
	uninstall(ctx, t, s)
	got := apiService()
	if _, ok := got.Annotations[names.DelegateAnnotation]; ok {
		t.Errorf("the record outlived the uninstall")
	}
	if s := got.Spec.Service; s.Namespace != delegateNS || s.Name != delegateService || string(got.Spec.CABundle) != string(original.CABundle) ||
		got.Spec.GroupPriorityMinimum != original.GroupPriorityMinimum {
		t.Errorf("after uninstall the APIService is %+v, want the delegate's original %+v", got.Spec, original)
	}
	setDelegateTarget(ctx, t, s, "queue", 42)
	waitReplicas(ctx, t, s, "queue", 1, time.Minute, nil, nil)
}

// externalMetricsAPIServiceOf is an aggregator client of cfg and a getter of
// v1beta1.external.metrics.k8s.io that fails t when the Get does.
func externalMetricsAPIServiceOf(ctx context.Context, t *testing.T, cfg *rest.Config) (aggregator.Interface, func() *apiregv1.APIService) {
	t.Helper()
	ac, err := aggregator.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ac, func() *apiregv1.APIService {
		t.Helper()
		a, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
}
