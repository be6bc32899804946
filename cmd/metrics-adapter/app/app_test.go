package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics/legacyregistry"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/capscale/capscale/internal/names"
)

const testConfig = `sources:
- name: %s
  url: %s
  jsonPath: '{.data.load_balance}'
  interval: 30s
  timeout: 5s
  maxAge: 2m
%s`

const testPolicy = `stepPolicies:
- workload: {namespace: ai, kind: Deployment, name: gpu}
  source: gpu-load
  scaleUpAbove: 0.8
  scaleDownBelow: 0.5
  stepUp: 3
  stepDown: 1
  minReplicas: 0
  maxReplicas: 20
  minPodAge: 10m
  interval: 5m
`

// TestAdapterWiring runs everything Run wires except the API server against
// a fake clientset: readiness follows the informers, the config's source is
// polled and served, and a reload swaps sources and policies.
func TestAdapterWiring(t *testing.T) {
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"data":{"load_balance":0.83}}`))
	}))
	t.Cleanup(src.Close)
	cfgFile := filepath.Join(t.TempDir(), "adapter.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(cfgFile, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf(testConfig, "gpu-load", src.URL, testPolicy))

	replicas := int32(4)
	cs := fake.NewClientset(&appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ai", Name: "gpu"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "gpu"}},
		},
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithCancel(context.Background())
	a, err := newAdapter(ctx, cs, clk, cfgFile, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); a.stop() })
	if err := a.register(prometheus.NewPedanticRegistry()); err != nil {
		t.Fatalf("register: %v", err)
	}

	if err := a.readyCheck(nil); err == nil {
		t.Error("ready before the informers started")
	}
	a.start(ctx)
	eventually(t, "informers synced", func() bool { return a.readyCheck(nil) == nil })

	get := func(metric string, set labels.Set) (string, error) {
		l, err := a.provider.GetExternalMetric(ctx, "ai", labels.SelectorFromSet(set), cmprovider.ExternalMetricInfo{Metric: metric})
		if err != nil {
			return "", err
		}
		return l.Items[0].Value.String(), nil
	}
	eventually(t, "first poll served", func() bool {
		v, err := get(names.LoadIndexMetric, labels.Set{"source": "gpu-load"})
		return err == nil && v == "830m"
	})
	if v, err := get(names.DesiredReplicasMetric, labels.Set{"workload": "gpu", "policy": "load-step"}); err != nil || v != "7" {
		t.Errorf("load-step = %q, %v; want 7", v, err)
	}

	// Reload: gpu-load and its policy go away, cpu-load arrives.
	write(fmt.Sprintf(testConfig, "cpu-load", src.URL, ""))
	eventually(t, "reload applied", func() bool {
		clk.Step(time.Second)
		return strings.Join(a.sources.Names(), ",") == "cpu-load"
	})
	if _, err := get(names.LoadIndexMetric, labels.Set{"source": "gpu-load"}); !apierrors.IsNotFound(err) {
		t.Errorf("removed source: err = %v, want NotFound", err)
	}
	if _, err := get(names.DesiredReplicasMetric, labels.Set{"workload": "gpu", "policy": "load-step"}); !apierrors.IsNotFound(err) {
		t.Errorf("removed policy: err = %v, want NotFound", err)
	}
	eventually(t, "new source served", func() bool {
		v, err := get(names.LoadIndexMetric, labels.Set{"source": "cpu-load"})
		return err == nil && v == "830m"
	})
}

func TestNewAdapterRejectsInvalidConfig(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "adapter.yaml")
	if err := os.WriteFile(cfgFile, []byte("sources: [{name: x}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	_, err := newAdapter(context.Background(), fake.NewClientset(), clk, cfgFile, time.Second)
	if err == nil || !strings.Contains(err.Error(), "sources[0].url") {
		t.Fatalf("err = %v, want a field error", err)
	}
}

func TestNewAdapterWithoutConfig(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	a, err := newAdapter(context.Background(), fake.NewClientset(), clk, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.stop()
	if a.watcher != nil || len(a.sources.Names()) != 0 {
		t.Error("without --config there must be no watcher and no sources")
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMetricsInLegacyRegistry: the adapter's /metrics serves the
// component-base legacy registry, so capscale's collectors must show there.
func TestMetricsInLegacyRegistry(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	a, err := newAdapter(context.Background(), fake.NewClientset(), clk, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.stop()
	if err := a.register(legacyregistry.Registerer()); err != nil {
		t.Fatal(err)
	}
	// One request so that the requests counter has a series.
	_, _ = a.provider.GetExternalMetric(context.Background(), "ns", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: names.LoadIndexMetric})

	rec := httptest.NewRecorder()
	legacyregistry.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		"capscale_adapter_config_last_reload_success_timestamp_seconds",
		`capscale_adapter_requests_total{code="400",metric="capscale-load-index"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
