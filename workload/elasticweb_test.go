package workload

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsfake "k8s.io/metrics/pkg/client/clientset/versioned/fake"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/metricsadapter/policy"
)

func TestElasticWebApplyAndGet(t *testing.T) {
	e := newEnv(t, deployment("ns", "taken", 1))
	ctx := context.Background()
	var st ElasticWebStatus
	body := `{"image":"nginx:1.27","port":8080,"singlePodQPS":100,"totalQPS":250}`
	if code := e.do(http.MethodPut, "/v1/namespaces/ns/elasticwebs/shop", "alice", body, &st); code != http.StatusOK {
		t.Fatalf("apply: %d", code)
	}
	if st.QPSReplicas != 3 {
		t.Errorf("qpsReplicas = %d, want ceil(250/100) = 3", st.QPSReplicas)
	}

	d, err := e.cs.AppsV1().Deployments("ns").Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Annotations[names.SinglePodQPSAnnotation] != "100" || d.Annotations[names.TotalQPSAnnotation] != "250" {
		t.Errorf("deployment annotations %v", d.Annotations)
	}
	if c := d.Spec.Template.Spec.Containers; len(c) != 1 || c[0].Image != "nginx:1.27" || c[0].Ports[0].ContainerPort != 8080 {
		t.Errorf("containers %+v", c)
	}
	if d.Spec.Replicas != nil {
		t.Errorf("apply set replicas %d: the HPA owns them", *d.Spec.Replicas)
	}
	if !slices.ContainsFunc(d.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == names.FieldManager && m.Operation == metav1.ManagedFieldsOperationApply
	}) {
		t.Errorf("deployment not applied by field manager %q: %+v", names.FieldManager, d.ManagedFields)
	}

	svc, err := e.cs.CoreV1().Services("ns").Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Selector[ElasticWebLabel] != "shop" {
		t.Errorf("service %+v", svc.Spec)
	}

	h, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers("ns").Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != "shop" || *h.Spec.MinReplicas != 1 || h.Spec.MaxReplicas != 10 {
		t.Errorf("hpa spec %+v", h.Spec)
	}
	m := h.Spec.Metrics
	if len(m) != 1 || m[0].Type != autoscalingv2.ExternalMetricSourceType || m[0].External.Metric.Name != names.DesiredReplicasMetric ||
		m[0].External.Metric.Selector.MatchLabels["workload"] != "shop" || m[0].External.Metric.Selector.MatchLabels["policy"] != names.PolicyQPS ||
		m[0].External.Target.Type != autoscalingv2.AverageValueMetricType || m[0].External.Target.AverageValue.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("hpa metrics %+v", m)
	}
	if b := h.Spec.Behavior; b == nil || b.ScaleUp.Tolerance == nil || !b.ScaleUp.Tolerance.IsZero() || b.ScaleDown.Tolerance == nil || !b.ScaleDown.Tolerance.IsZero() {
		t.Errorf("hpa behavior %+v: want tolerance 0 both ways", b)
	}

	// Re-apply with new QPS: same objects, new annotations.
	if code := e.do(http.MethodPut, "/v1/namespaces/ns/elasticwebs/shop", "alice", `{"image":"nginx:1.27","port":8080,"singlePodQPS":100,"totalQPS":900}`, nil); code != http.StatusOK {
		t.Fatalf("re-apply: %d", code)
	}
	if d, _ = e.cs.AppsV1().Deployments("ns").Get(ctx, "shop", metav1.GetOptions{}); d.Annotations[names.TotalQPSAnnotation] != "900" {
		t.Errorf("re-apply kept total QPS %q", d.Annotations[names.TotalQPSAnnotation])
	}

	// The HPA has scaled it and two pods are ready.
	d.Spec.Replicas = new(int32)
	*d.Spec.Replicas = 3
	d.Status.ReadyReplicas = 2
	if _, err := e.cs.AppsV1().Deployments("ns").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Status = autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: 3, DesiredReplicas: 9, Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{
		{Type: autoscalingv2.ScalingActive, Status: corev1.ConditionTrue, Reason: "ValidMetricFound"},
	}}
	if _, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers("ns").UpdateStatus(ctx, h, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		st = ElasticWebStatus{}
		code := e.do(http.MethodGet, "/v1/namespaces/ns/elasticwebs/shop", "alice", "", &st)
		return code == http.StatusOK && st.ReadyReplicas == 2 && st.HPA != nil && st.HPA.DesiredReplicas == 9, nil
	})
	if err != nil {
		t.Fatalf("GET never showed the scaled state: %+v", st)
	}
	if st.DesiredReplicas != 3 || st.RealQPS != 200 || st.TotalQPS != 900 || st.QPSReplicas != 9 || st.Image != "nginx:1.27" || st.Port != 8080 {
		t.Errorf("GET %+v: want desired 3, realQPS 2×100, qpsReplicas 9", st)
	}
	if len(st.HPA.Conditions) != 1 || st.HPA.Conditions[0].Reason != "ValidMetricFound" {
		t.Errorf("HPA state %+v", st.HPA)
	}

	// A Deployment that is not an elastic web is neither taken over nor shown.
	var msg string
	if code := e.do(http.MethodPut, "/v1/namespaces/ns/elasticwebs/taken", "alice", body, &msg); code != http.StatusConflict || !strings.Contains(msg, "not an elastic web") {
		t.Errorf("apply over a foreign deployment: %d %q", code, msg)
	}
	if code := e.do(http.MethodGet, "/v1/namespaces/ns/elasticwebs/taken", "alice", "", nil); code != http.StatusNotFound {
		t.Errorf("GET of a foreign deployment: %d, want 404", code)
	}
	if code := e.do(http.MethodGet, "/v1/namespaces/ns/elasticwebs/absent", "alice", "", nil); code != http.StatusNotFound {
		t.Errorf("GET of nothing: %d, want 404", code)
	}
}

func TestElasticWebValidation(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name, path, body string
		want             int
		wantFields       []string
	}{
		{name: "all missing", body: `{}`, want: http.StatusUnprocessableEntity, wantFields: []string{"image", "port", "singlePodQPS", "totalQPS"}},
		{name: "bad values", body: `{"image":"a b","port":70000,"singlePodQPS":0,"totalQPS":-1}`, want: http.StatusUnprocessableEntity, wantFields: []string{"image", "port", "singlePodQPS", "totalQPS"}},
		{name: "QPS the adapter cannot read", body: `{"image":"x","port":80,"singlePodQPS":1,"totalQPS":1e300}`, want: http.StatusUnprocessableEntity, wantFields: []string{"totalQPS"}},
		{name: "bad bounds", body: `{"image":"x","port":80,"singlePodQPS":1,"totalQPS":1,"minReplicas":5,"maxReplicas":2}`, want: http.StatusUnprocessableEntity, wantFields: []string{"maxReplicas"}},
		{name: "bad name", path: "/v1/namespaces/ns/elasticwebs/9Shop", body: `{"image":"x","port":80,"singlePodQPS":1,"totalQPS":1}`, want: http.StatusUnprocessableEntity, wantFields: []string{"metadata.name"}},
		{name: "unknown field", body: `{"image":"x","port":80,"singlePodQPS":1,"totalQPS":1,"replicas":3}`, want: http.StatusBadRequest, wantFields: []string{"replicas"}},
		{name: "wrong type", body: `{"image":"x","port":"80","singlePodQPS":1,"totalQPS":1}`, want: http.StatusBadRequest, wantFields: []string{"port"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/namespaces/ns/elasticwebs/shop"
			}
			var msg string
			if code := e.do(http.MethodPut, path, "alice", tc.body, &msg); code != tc.want {
				t.Errorf("status = %d, want %d (%s)", code, tc.want, msg)
			}
			for _, f := range tc.wantFields {
				if !strings.Contains(msg, f) {
					t.Errorf("message %q does not name field %q", msg, f)
				}
			}
		})
	}
	if _, err := e.cs.AppsV1().Deployments("ns").Get(context.Background(), "shop", metav1.GetOptions{}); err == nil {
		t.Error("an invalid request created the deployment")
	}
}

func TestElasticWebBounds(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int32) *int32 { return &v }
	tests := []struct {
		name             string
		req              ElasticWebRequest
		wantMin, wantMax int32
	}{
		{name: "defaults", req: ElasticWebRequest{SinglePodQPS: f(10), TotalQPS: f(30)}, wantMin: 1, wantMax: 10},
		{name: "max follows the QPS", req: ElasticWebRequest{SinglePodQPS: f(10), TotalQPS: f(101)}, wantMin: 1, wantMax: 22},
		{name: "explicit", req: ElasticWebRequest{SinglePodQPS: f(10), TotalQPS: f(101), MinReplicas: i(2), MaxReplicas: i(4)}, wantMin: 2, wantMax: 4},
		{name: "min above default max", req: ElasticWebRequest{SinglePodQPS: f(10), TotalQPS: f(1), MinReplicas: i(12)}, wantMin: 12, wantMax: 12},
		{name: "huge QPS does not overflow", req: ElasticWebRequest{SinglePodQPS: f(1e-9), TotalQPS: f(1e30)}, wantMin: 1, wantMax: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if lo, hi := tc.req.bounds(); lo != tc.wantMin || hi != tc.wantMax {
				t.Errorf("bounds = %d..%d, want %d..%d", lo, hi, tc.wantMin, tc.wantMax)
			}
		})
	}
}

// TestQPSReplicasIsTheAdaptersRule pins elastic web to the adapter's exact
// arithmetic. In float64, 0.33/0.03 is 11.000000000000002 and 0.07/0.01 is
// 7.000000000000001, so a float ceil says 12 and 8 where the adapter (and so
// the HPA's metric) says 11 and 7. (1.1/0.1 happens to divide to exactly 11
// in float64; it is pinned too.)
func TestQPSReplicasIsTheAdaptersRule(t *testing.T) {
	tests := []struct {
		total, single float64
		want          int32
	}{
		{total: 1.1, single: 0.1, want: 11},
		{total: 0.33, single: 0.03, want: 11},
		{total: 0.07, single: 0.01, want: 7},
		{total: 250, single: 100, want: 3},
		{total: 0, single: 5, want: 0},
		{total: 0.3, single: 0.1, want: 3},
		{total: 1e30, single: 1e-9, want: math.MaxInt32},
	}
	for _, tc := range tests {
		got := qpsReplicas(tc.total, tc.single)
		if got != tc.want {
			t.Errorf("qpsReplicas(%v, %v) = %d, want %d", tc.total, tc.single, got, tc.want)
		}
		want, err := policy.DesiredReplicasFromAnnotations(qpsAnnotations(tc.total, tc.single))
		if err != nil || int64(got) != want {
			t.Errorf("qpsReplicas(%v, %v) = %d, the adapter says %d (%v)", tc.total, tc.single, got, want, err)
		}
	}
}

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

// TestElasticWebRefusesForeignObjects: a Service or HPA of the elastic web's
// name that is not part of one is not taken over, as for the Deployment.
func TestElasticWebRefusesForeignObjects(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shop", Labels: map[string]string{"app": "other"}}}
	h := hpa("ns", "cart", "elsewhere", nil, 3)
	e := newEnv(t, svc, h)
	body := `{"image":"nginx","port":80,"singlePodQPS":10,"totalQPS":30}`
	for _, name := range []string{"shop", "cart"} {
		var msg string
		if code := e.do(http.MethodPut, "/v1/namespaces/ns/elasticwebs/"+name, "alice", body, &msg); code != http.StatusConflict || !strings.Contains(msg, "not an elastic web") {
			t.Errorf("apply over a foreign object %s: %d %q, want 409", name, code, msg)
		}
		if _, err := e.cs.AppsV1().Deployments("ns").Get(context.Background(), name, metav1.GetOptions{}); err == nil {
			t.Errorf("a refused apply created deployment %s", name)
		}
	}
	got, err := e.cs.CoreV1().Services("ns").Get(context.Background(), "shop", metav1.GetOptions{})
	if err != nil || got.Labels["app"] != "other" || got.Labels[ElasticWebLabel] != "" {
		t.Errorf("foreign service changed: %+v, %v", got, err)
	}
}
