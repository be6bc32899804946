//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	externalmetrics "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"

	"github.com/capscale/capscale/e2e/loadsource"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

var scaledObjects = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}

// kedaBinDir is where `make keda` links KEDA's operator and metrics server
// (the plane's tools directory).
func kedaBinDir(t *testing.T, s *stack.Stack) string {
	t.Helper()
	dir := s.Plane.Opts.BinDir
	for _, bin := range []string{"keda-operator", "keda-adapter"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			t.Fatalf("KEDA's %s is not in %s: run `make keda` (make e2e does): %v", bin, dir, err)
		}
	}
	return dir
}

// metricsAPIScaledObject scales name on a metrics-api trigger that reads the
// load source's data.load_balance, target per replica given.
func metricsAPIScaledObject(name, url string, target int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": name, "namespace": adapterNS},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": name},
			"pollingInterval": int64(1), "minReplicaCount": int64(1), "maxReplicaCount": int64(10),
			"advanced": map[string]any{"horizontalPodAutoscalerConfig": map[string]any{
				"behavior": map[string]any{
					"scaleDown": map[string]any{"stabilizationWindowSeconds": int64(0)},
				},
			}},
			"triggers": []any{map[string]any{
				"type": "metrics-api",
				"metadata": map[string]any{
					"url": url, "valueLocation": "data.load_balance", "targetValue": fmt.Sprint(target),
				},
			}},
		},
	}}
}

// scaleQueueWithKEDA creates Deployment queue and a metrics-api
// ScaledObject on the load source at url (10 per replica), and waits for
// KEDA to scale it to 3 (the tests set the load to 30).
func scaleQueueWithKEDA(ctx context.Context, t *testing.T, s *stack.Stack, url string) {
	t.Helper()
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Create(ctx, SimpleDeployment(adapterNS, "queue", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(scaledObjects).Namespace(adapterNS).Create(ctx, metricsAPIScaledObject("queue", url, 10), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, s, "queue", 3, 2*time.Minute, nil, nil)
}

// hpaWatch records every status of an HPA that reports ScalingActive=False.
type hpaWatch struct {
	mu       sync.Mutex
	inactive []string
	seen     int
}

func watchHPA(ctx context.Context, t *testing.T, s *stack.Stack, name string) *hpaWatch {
	t.Helper()
	w, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	h := &hpaWatch{}
	go func() {
		for ev := range w.ResultChan() {
			hpa, ok := ev.Object.(*autoscalingv2.HorizontalPodAutoscaler)
			if !ok {
				continue
			}
			h.mu.Lock()
			h.seen++
			for _, c := range hpa.Status.Conditions {
				if c.Type == autoscalingv2.ScalingActive && c.Status == corev1.ConditionFalse {
					h.inactive = append(h.inactive, fmt.Sprintf("%s: %s", c.Reason, c.Message))
				}
			}
			h.mu.Unlock()
		}
	}()
	t.Cleanup(w.Stop)
	return h
}

// waitHPAActive waits until the HPA reports ScalingActive=True.
func waitHPAActive(ctx context.Context, t *testing.T, s *stack.Stack, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		hpa, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range hpa.Status.Conditions {
			if c.Type == autoscalingv2.ScalingActive {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("HPA %s never reported ScalingActive=True", name)
	}
}

func (h *hpaWatch) report() (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen, append([]string(nil), h.inactive...)
}

// TestRealKEDADelegation (issue 27, tests 1 and 4): KEDA's own operator and
// metrics server own the external-metrics APIService and scale a Deployment
// through the HPA KEDA made. capscale installs in delegation mode in front
// of them: KEDA's HPA keeps scaling and never reports ScalingActive=False,
// the metric it reads through capscale equals what KEDA's server answers
// itself, and an HPA on a capscale-* metric scales too. Uninstalling gives
// the APIService back to KEDA unchanged, and KEDA's HPA still scales.
func TestRealKEDADelegation(t *testing.T) {
	ctx := testContext(t, 12*time.Minute)
	s := startStack(t, stack.Options{Plane: plane.Options{Nodes: 2, Logf: t.Logf, HPASyncPeriod: 2 * time.Second}})
	if err := s.WaitForNamespace(ctx, adapterNS); err != nil {
		t.Fatal(err)
	}
	src := &loadsource.Source{}
	src.Set(30)
	srv := httptest.NewServer(src)
	t.Cleanup(srv.Close)

	k, err := s.StartKEDA(ctx, kedaBinDir(t, s), stack.KEDAOptions{})
	if err != nil {
		t.Fatalf("starting KEDA: %v", err)
	}
	ac, err := aggregator.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	original, err := ac.ApiregistrationV1().APIServices().Get(ctx, "v1beta1.external.metrics.k8s.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// 1. KEDA alone: 30 / 10 per replica = 3 replicas.
	scaleQueueWithKEDA(ctx, t, s, srv.URL)
	hpaName := "keda-hpa-queue"
	kedaHPA, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Get(ctx, hpaName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("KEDA's HPA: %v", err)
	}
	metric := kedaHPA.Spec.Metrics[0].External.Metric
	selector := metav1.FormatLabelSelector(metric.Selector)
	t.Logf("KEDA's HPA reads %s{%s}", metric.Name, selector)
	watch := watchHPA(ctx, t, s, hpaName)

	// 2. capscale in front, delegating: what DELEGATE=true hack/install.sh
	// does (preflight --delegate, then capscale's APIService).
	out, err := preflight(ctx, s.Plane, "--delegate")
	if err != nil || !strings.Contains(out, "recorded "+stack.KEDANamespace+"/"+stack.KEDAMetricsService+":443 as the delegate") {
		t.Fatalf("preflight --delegate: %v\n%s", err, out)
	}
	if err := s.StartAdapter(ctx); err != nil {
		t.Fatalf("starting capscale's adapter: %v", err)
	}
	// Test 4: the value KEDA's HPA reads through capscale is KEDA's own.
	waitMetricValue(ctx, t, s, metric.Name, selector, 30)
	if direct := kedaDirect(ctx, t, s, k, metric.Name, selector); direct != 30 {
		t.Errorf("KEDA's server answers %d directly, want 30", direct)
	}
	src.Set(50)
	waitReplicas(ctx, t, s, "queue", 5, 2*time.Minute, nil, nil)
	createQPSWeb(ctx, t, s)
	waitReplicas(ctx, t, s, "web", 2, time.Minute, nil, nil)
	if n := forwarded(ctx, t, s, 200); n < 1 {
		t.Errorf("capscale_adapter_delegate_requests_total{code=200} = %v, want KEDA's metric forwarded", n)
	}
	if _, inactive := watch.report(); len(inactive) > 0 {
		t.Errorf("KEDA's HPA reported ScalingActive=False %d times with capscale installed: %v", len(inactive), inactive)
	}

	// 3. Uninstall: the APIService is KEDA's again, as it was, and KEDA's
	// HPA still scales (20 / 10 = 2).
	uninstall(ctx, t, s)
	got, err := ac.ApiregistrationV1().APIServices().Get(ctx, "v1beta1.external.metrics.k8s.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[names.DelegateAnnotation]; ok {
		t.Errorf("the delegate record outlived the uninstall")
	}
	if !apiequality.Semantic.DeepEqual(got.Spec, original.Spec) {
		g, _ := json.Marshal(got.Spec)
		o, _ := json.Marshal(original.Spec)
		t.Errorf("after uninstall the APIService spec differs from KEDA's original:\n got %s\nwant %s", g, o)
	}
	src.Set(20)
	waitReplicas(ctx, t, s, "queue", 2, 2*time.Minute, nil, nil)

	seen, inactive := watch.report()
	if seen < 2 {
		t.Errorf("saw %d statuses of KEDA's HPA, want its syncs through the install and uninstall", seen)
	}
	if len(inactive) > 0 {
		t.Errorf("KEDA's HPA reported ScalingActive=False %d times through the install and the uninstall: %v", len(inactive), inactive)
	}
}

// kedaDirect reads metric from KEDA's metrics server itself, not through
// the aggregator, as the HPA controller's ServiceAccount (KEDA's RBAC lets
// it read external metrics).
func kedaDirect(ctx context.Context, t *testing.T, s *stack.Stack, k *stack.KEDA, metric, selector string) int64 {
	t.Helper()
	token, err := s.ServiceAccountToken(ctx, "kube-system", "horizontal-pod-autoscaler")
	if err != nil {
		t.Fatal(err)
	}
	var value int64
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		path := fmt.Sprintf("/apis/external.metrics.k8s.io/v1beta1/namespaces/%s/%s?labelSelector=%s", adapterNS, metric, url.QueryEscape(selector))
		code, body, err := adapterGetAt(ctx, s, fmt.Sprintf("https://127.0.0.1:%d", k.AdapterPort), path, token)
		if err != nil || code != 200 {
			return false, nil
		}
		var list externalmetrics.ExternalMetricValueList
		if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Items) != 1 {
			return false, nil
		}
		value = list.Items[0].Value.Value()
		return true, nil
	})
	if err != nil {
		t.Fatalf("reading %s from KEDA's server directly: %v", metric, err)
	}
	return value
}

// kedaScalerAuth creates the Secret and TriggerAuthentication KEDA's
// operator dials capscale's scaler with: the CA that verifies capscale
// (the cluster CA signs the adapter's serving certificate here) and a client
// certificate of the CA the scaler trusts (the front-proxy CA here).
func kedaScalerAuth(ctx context.Context, t *testing.T, s *stack.Stack, dyn dynamic.Interface) {
	t.Helper()
	pair, err := s.PKI.FrontProxy.Issue(t.TempDir(), "keda-operator", plane.CertSpec{CommonName: "keda-operator", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for key, file := range map[string]string{"caCert": s.PKI.ClusterCA.CertFile, "tlsClientCert": pair.CertFile, "tlsClientKey": pair.KeyFile} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		data[key] = b
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "capscale-keda-scaler-tls", Namespace: adapterNS}, Data: data}
	if _, err := s.Client.CoreV1().Secrets(adapterNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var refs []any
	for _, key := range []string{"caCert", "tlsClientCert", "tlsClientKey"} {
		refs = append(refs, map[string]any{"parameter": key, "name": secret.Name, "key": key})
	}
	auth := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
		"metadata": map[string]any{"name": "capscale-keda-scaler", "namespace": adapterNS},
		"spec":     map[string]any{"secretTargetRef": refs},
	}}
	gvr := schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "triggerauthentications"}
	if _, err := dyn.Resource(gvr).Namespace(adapterNS).Create(ctx, auth, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// externalScaledObject scales name with one capscale trigger of the given
// type (external or external-push) and metadata.
func externalScaledObject(name, typ, addr string, min, max int64, md map[string]any, spec map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"scalerAddress": addr}
	for k, v := range md {
		meta[k] = v
	}
	s := map[string]any{
		"scaleTargetRef":  map[string]any{"name": name},
		"pollingInterval": int64(1), "cooldownPeriod": int64(5),
		"minReplicaCount": min, "maxReplicaCount": max,
		"advanced": map[string]any{"horizontalPodAutoscalerConfig": map[string]any{"behavior": map[string]any{
			"scaleUp":   map[string]any{"stabilizationWindowSeconds": int64(0)},
			"scaleDown": map[string]any{"stabilizationWindowSeconds": int64(0)},
		}}},
		"triggers": []any{map[string]any{
			"type": typ, "metadata": meta,
			"authenticationRef": map[string]any{"name": "capscale-keda-scaler"},
		}},
	}
	for k, v := range spec {
		s[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": name, "namespace": adapterNS},
		"spec":     s,
	}}
}

// TestRealKEDAExternalScaler (issue 27, test 3): KEDA's own operator calls
// capscale's external scaler, with TLS from a TriggerAuthentication, and
// scales through the HPA KEDA made and KEDA's metrics server:
//   - gpu follows capscale's step policy (load above 0.8 adds 3, the band
//     holds, below 0.5 removes 1, within [4, 7]);
//   - idle, on the load index with an activation threshold over
//     external-push (StreamIsActive), goes from zero to active and back;
//   - with capscale's source stale, its errors put gpu on KEDA's fallback
//     replicas; with capscale's scaler killed, gpu holds (KEDA applies no
//     fallback to an unreachable external scaler: kedacore/keda#8056); once
//     either returns, gpu follows the policy again.
func TestRealKEDAExternalScaler(t *testing.T) {
	port, err := plane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s, src := startAdapterStack(t, 0.1, func(o *stack.Options) {
		o.Prepare = func(_ context.Context, s *stack.Stack) error {
			s.Opts.AdapterArgs = append(s.Opts.AdapterArgs, "--keda-scaler-bind-address="+addr,
				"--keda-scaler-client-ca-file="+s.PKI.FrontProxy.CertFile, "--keda-scaler-stream-interval=1s")
			return nil
		}
	})
	ctx := testContext(t, 12*time.Minute)
	// KEDA owns the APIService; capscale serves only the scaler.
	if _, err := s.StartKEDA(ctx, kedaBinDir(t, s), stack.KEDAOptions{}); err != nil {
		t.Fatalf("starting KEDA: %v", err)
	}
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	kedaScalerAuth(ctx, t, s, dyn)
	for _, dep := range []*appsv1.Deployment{SimpleDeployment(adapterNS, "gpu", 4, nil), SimpleDeployment(adapterNS, "idle", 1, nil)} {
		if _, err := s.Client.AppsV1().Deployments(adapterNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gpu := externalScaledObject("gpu", "external", addr, 1, 10,
		map[string]any{"metric": names.DesiredReplicasMetric, "workload": "gpu", "policy": "load-step"},
		map[string]any{"fallback": map[string]any{"failureThreshold": int64(3), "replicas": int64(6)}})
	idle := externalScaledObject("idle", "external-push", addr, 0, 10,
		map[string]any{"metric": names.LoadIndexMetric, "source": "gpu-load", "targetValue": "0.7", "activationThreshold": "0.2"}, nil)
	for _, so := range []*unstructured.Unstructured{gpu, idle} {
		if _, err := dyn.Resource(scaledObjects).Namespace(adapterNS).Create(ctx, so, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Load 0.1: gpu at the policy's floor, idle not active: scaled to 0.
	waitReplicas(ctx, t, s, "idle", 0, 2*time.Minute, nil, nil)
	waitReplicas(ctx, t, s, "gpu", 4, time.Minute, nil, nil)
	// Load 0.9: gpu +3 (capped at 7); idle active, ceil(0.9/0.7) = 2.
	src.Set(0.9)
	waitReplicas(ctx, t, s, "gpu", 7, 2*time.Minute, nil, nil)
	waitReplicas(ctx, t, s, "idle", 2, 2*time.Minute, nil, nil)
	// Load 0.6: in the band, gpu holds.
	src.Set(0.6)
	holdReplicas(ctx, t, s, "gpu", 7, 12*time.Second)
	// Load 0.1: gpu steps down one at a time to 4; idle back to 0.
	src.Set(0.1)
	waitReplicas(ctx, t, s, "gpu", 4, 3*time.Minute, nil, nil)
	waitReplicas(ctx, t, s, "idle", 0, 2*time.Minute, nil, nil)

	// capscale's source stale: GetMetrics answers Unavailable (never 0),
	// and after three failed polls KEDA holds gpu at its fallback (6).
	src.SetDown(true)
	waitReplicas(ctx, t, s, "gpu", 6, 2*time.Minute, nil, nil)
	holdReplicas(ctx, t, s, "gpu", 6, 6*time.Second)
	// The source back: the policy rules again, stepping down to its floor.
	src.SetDown(false)
	waitReplicas(ctx, t, s, "gpu", 4, 3*time.Minute, nil, nil)

	// capscale's scaler gone altogether: KEDA v2.20.2 never counts a
	// failed GetMetricSpec towards fallback (kedacore/keda#8056), so its
	// HPA holds gpu where it is; then capscale returns and gpu follows
	// the policy again.
	s.KillAdapter(0)
	holdReplicas(ctx, t, s, "gpu", 4, 10*time.Second)
	if err := s.RestartAdapter(ctx, 0); err != nil {
		t.Fatal(err)
	}
	src.Set(0.9)
	waitReplicas(ctx, t, s, "gpu", 7, 2*time.Minute, nil, nil)
}

// apiServiceState is the external-metrics APIService's routing, caBundle
// and Available condition.
func apiServiceState(ctx context.Context, t *testing.T, ac aggregator.Interface) (svc string, caBundle []byte, available bool, msg string) {
	t.Helper()
	a, err := ac.ApiregistrationV1().APIServices().Get(ctx, "v1beta1.external.metrics.k8s.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range a.Status.Conditions {
		if c.Type == apiregv1.Available {
			available, msg = c.Status == apiregv1.ConditionTrue, c.Message
		}
	}
	return a.Spec.Service.Namespace + "/" + a.Spec.Service.Name, a.Spec.CABundle, available, msg
}

// TestRealKEDACertRotation (issue 27, test 2): KEDA's operator as its chart
// ships it, rotating its own certificates and writing its CA into the
// APIService's caBundle. With capscale in front, the operator writes its CA
// over capscale's, and the aggregator can no longer verify capscale: the
// APIService turns unavailable. The docs' answer, the operator with
// --enable-apiservice-patching=false (it still rotates its own
// certificates), keeps capscale's caBundle in place, and KEDA's HPA scales
// through capscale, which verifies KEDA's server with the CA it recorded.
func TestRealKEDACertRotation(t *testing.T) {
	ctx := testContext(t, 12*time.Minute)
	s := startStack(t, stack.Options{Plane: plane.Options{Nodes: 2, Logf: t.Logf, HPASyncPeriod: 2 * time.Second}})
	if err := s.WaitForNamespace(ctx, adapterNS); err != nil {
		t.Fatal(err)
	}
	src := &loadsource.Source{}
	src.Set(30)
	srv := httptest.NewServer(src)
	t.Cleanup(srv.Close)
	bin := kedaBinDir(t, s)
	k, err := s.StartKEDA(ctx, bin, stack.KEDAOptions{CertRotation: true})
	if err != nil {
		t.Fatalf("starting KEDA: %v", err)
	}
	kedaCA, err := k.CA()
	if err != nil {
		t.Fatal(err)
	}
	capscaleCA := s.PKI.ClusterCA.CAData()
	ac, err := aggregator.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	kedaSvc := stack.KEDANamespace + "/" + stack.KEDAMetricsService
	capscaleSvc := stack.Namespace + "/" + stack.AdapterService
	waitAPIService := func(what string, timeout time.Duration, ok func(svc string, ca []byte, available bool) bool) {
		t.Helper()
		var svc, msg string
		var available bool
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			var ca []byte
			svc, ca, available, msg = apiServiceState(ctx, t, ac)
			return ok(svc, ca, available), nil
		})
		if err != nil {
			t.Fatalf("APIService never %s: routes to %s, available %v (%s)", what, svc, available, msg)
		}
	}
	// KEDA's operator writes its own CA into the APIService.
	waitAPIService("held KEDA's CA and was available", time.Minute, func(svc string, ca []byte, available bool) bool {
		return svc == kedaSvc && bytes.Equal(ca, kedaCA) && available
	})
	scaleQueueWithKEDA(ctx, t, s, srv.URL)

	// capscale in front with the operator as shipped: it writes KEDA's CA
	// over capscale's, and the aggregator cannot verify capscale.
	if out, err := preflight(ctx, s.Plane, "--delegate"); err != nil {
		t.Fatalf("preflight --delegate: %v\n%s", err, out)
	}
	if err := s.StartAdapter(ctx); err != nil {
		t.Logf("capscale's APIService did not turn available: %v", err)
	}
	waitAPIService("routed to capscale with KEDA's CA written back, unavailable", time.Minute, func(svc string, ca []byte, available bool) bool {
		return svc == capscaleSvc && bytes.Equal(ca, kedaCA) && !available
	})

	// The answer: the operator stops writing the APIService (it still
	// rotates its own certificates), and the install puts capscale's
	// caBundle back.
	k.Operator.Kill()
	k.Adapter.Kill()
	k.Opts.NoAPIServicePatching = true
	if err := s.RestartKEDA(ctx, k, bin); err != nil {
		t.Fatal(err)
	}
	if again, err := k.CA(); err != nil || !bytes.Equal(again, kedaCA) {
		t.Fatalf("KEDA's CA changed across the restart (%v): the recorded caBundle would no longer verify it", err)
	}
	if err := s.RouteAPIService(ctx, stack.Namespace, stack.AdapterService); err != nil {
		t.Fatal(err)
	}
	// From the HPA's first active sync after the fix on, it stays active.
	waitHPAActive(ctx, t, s, "keda-hpa-queue")
	watch := watchHPA(ctx, t, s, "keda-hpa-queue")
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if svc, ca, available, msg := apiServiceState(ctx, t, ac); svc != capscaleSvc || !bytes.Equal(ca, capscaleCA) || !available {
			t.Fatalf("with patching off the APIService routes to %s, capscale's caBundle %v, available %v (%s)", svc, bytes.Equal(ca, capscaleCA), available, msg)
		}
	}
	src.Set(50)
	waitReplicas(ctx, t, s, "queue", 5, 2*time.Minute, nil, nil)
	if n := forwarded(ctx, t, s, 200); n < 1 {
		t.Errorf("capscale_adapter_delegate_requests_total{code=200} = %v, want KEDA's metric forwarded", n)
	}
	if _, inactive := watch.report(); len(inactive) > 0 {
		t.Errorf("KEDA's HPA reported ScalingActive=False with patching off: %v", inactive)
	}
}
