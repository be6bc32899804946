package workload

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsfake "k8s.io/metrics/pkg/client/clientset/versioned/fake"
)

func TestCapacityReportsLiveUsage(t *testing.T) {
	mc := metricsfake.NewSimpleClientset()
	mc.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &metricsv1beta1.NodeMetricsList{Items: []metricsv1beta1.NodeMetrics{{
			ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Usage:      corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("750m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		}}}, nil
	})
	e := newEnvWith(t, envOpts{metrics: mc}, readyNode("n1", "4"), deployment("ns", "web", 1))
	var r CapacityResponse
	if code := e.do(http.MethodGet, "/v1/namespaces/ns/deployments/web/capacity", "alice", "", &r); code != http.StatusOK {
		t.Fatalf("capacity: %d", code)
	}
	if !r.Capacity.UsageAvailable || r.UsageMessage != "" || len(r.Capacity.Nodes) != 1 || r.Capacity.Nodes[0].Usage == nil || r.Capacity.Nodes[0].Usage.CPUMillis != 750 {
		t.Errorf("live usage missing: %+v", r)
	}
	if r.Capacity.Replicas != 4 {
		t.Errorf("replicas = %d: usage must not change the fit, which is on requests", r.Capacity.Replicas)
	}
}

func TestProbesAndMetrics(t *testing.T) {
	e := newEnv(t, deployment("ns", "web", 1))
	for _, p := range []string{"/healthz", "/readyz", "/openapi.json"} {
		if code := e.do(http.MethodGet, p, "", "", nil); code != http.StatusOK {
			t.Errorf("%s: %d", p, code)
		}
	}
	e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/stop", "alice", "", nil)
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	b := string(raw)
	for _, want := range []string{
		`capscale_workload_http_requests_total{code="200",route="/v1/namespaces/{namespace}/{resource}/{name}/stop"} 1`,
		`capscale_workload_mutations_total{action="stop",result="200"} 1`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestReadyzBeforeSync(t *testing.T) {
	s := &Server{synced: nil}
	s.synced = append(s.synced, func() bool { return false })
	rec := httptest.NewRecorder()
	s.readyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("readyz before sync = %d, want 503", rec.Code)
	}
}

func TestReadyzWhileDisconnected(t *testing.T) {
	for _, tc := range []struct {
		name      string
		connected func() error
		want      int
	}{
		{"connected", func() error { return nil }, http.StatusOK},
		{"watch down", func() error {
			return errors.New("informers not connected to the apiserver: /api/v1/pods: connection refused")
		}, http.StatusServiceUnavailable},
		{"not tracked", nil, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{connected: tc.connected}
			s.synced = append(s.synced, func() bool { return true })
			rec := httptest.NewRecorder()
			s.readyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != tc.want {
				t.Errorf("readyz = %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
		})
	}
}

// TestOpenAPICoversRoutes keeps /openapi.json in step with the router: every
// route must be documented, and nothing documented may be missing.
func TestOpenAPICoversRoutes(t *testing.T) {
	e := newEnv(t)
	b, err := json.Marshal(openAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi = %q, want 3.x", doc.OpenAPI)
	}
	routed := map[string]bool{}
	err = chi.Walk(e.srv.router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed[strings.ToLower(method)+" "+route] = true
		if _, ok := doc.Paths[route][strings.ToLower(method)]; !ok {
			t.Errorf("route %s %s is not in the OpenAPI document", method, route)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, ops := range doc.Paths {
		for m := range ops {
			if !routed[m+" "+p] {
				t.Errorf("the OpenAPI document has %s %s, which is not routed", m, p)
			}
		}
	}
	// Every $ref resolves.
	var full map[string]any
	if err := json.Unmarshal(b, &full); err != nil {
		t.Fatal(err)
	}
	schemas := full["components"].(map[string]any)["schemas"].(map[string]any)
	for _, m := range refRE(string(b)) {
		if _, ok := schemas[m]; !ok {
			t.Errorf("dangling $ref %q", m)
		}
	}
}

func refRE(s string) []string {
	var out []string
	const prefix = `"$ref":"#/components/schemas/`
	for {
		i := strings.Index(s, prefix)
		if i < 0 {
			return out
		}
		s = s[i+len(prefix):]
		j := strings.IndexByte(s, '"')
		out = append(out, s[:j])
		s = s[j:]
	}
}
