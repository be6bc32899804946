package main

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capscale/capscale/internal/names"
)

func TestParseSides(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		wantErr  string
	}{
		{name: "both, APIService first whatever the order", in: "keda,apiservice", want: []string{sideAPIService, sideKEDA}},
		{name: "one", in: "keda", want: []string{sideKEDA}},
		{name: "spaces and repeats", in: " apiservice , apiservice", want: []string{sideAPIService}},
		{name: "unknown", in: "keda,hpa", wantErr: `got "hpa"`},
		{name: "empty", in: "", wantErr: `got ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSides(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseSides(%q) error %v, want one containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseSides(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestKEDAOptionsCheck(t *testing.T) {
	good := kedaOptions{ScaledObjects: 300, Rounds: 5, Polling: 30 * time.Second, Steady: time.Minute, Sides: []string{sideKEDA}}
	for _, tc := range []struct {
		name    string
		change  func(*kedaOptions)
		wantErr []string
	}{
		{name: "defaults", change: func(*kedaOptions) {}},
		{name: "no ScaledObjects", change: func(o *kedaOptions) { o.ScaledObjects = 0 }, wantErr: []string{"--scaled-objects"}},
		{name: "too many", change: func(o *kedaOptions) { o.ScaledObjects = maxScaledObjects + 1 }, wantErr: []string{"--scaled-objects"}},
		{name: "no rounds", change: func(o *kedaOptions) { o.Rounds = 0 }, wantErr: []string{"--keda-rounds"}},
		{name: "fractional polling", change: func(o *kedaOptions) { o.Polling = 1500 * time.Millisecond }, wantErr: []string{"--keda-polling-interval"}},
		{name: "zero polling", change: func(o *kedaOptions) { o.Polling = 0 }, wantErr: []string{"--keda-polling-interval"}},
		{name: "window under one sync", change: func(o *kedaOptions) { o.Steady = 10 * time.Second }, wantErr: []string{"--keda-steady"}},
		{name: "no side", change: func(o *kedaOptions) { o.Sides = nil }, wantErr: []string{"--keda-sides"}},
		{name: "every problem at once", change: func(o *kedaOptions) { o.Rounds, o.Steady = -1, 0 }, wantErr: []string{"--keda-rounds", "--keda-steady"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.change(&o)
			err := o.check()
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("check() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("check() = nil, want errors about %v", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("check() = %v, want it to name %s", err, w)
				}
			}
		})
	}
}

func TestNodesFor(t *testing.T) {
	for n, want := range map[int]int{1: 1, 49: 1, 50: 2, 300: 7, 5000: 101} {
		got := nodesFor(n)
		if got != want {
			t.Errorf("nodesFor(%d) = %d, want %d", n, got, want)
		}
		if got*110 < 2*n {
			t.Errorf("nodesFor(%d) = %d nodes cannot hold %d pods", n, got, 2*n)
		}
	}
}

func TestFlagValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
		ok   bool
	}{
		{name: "equals", args: []string{"--bind-address=127.0.0.1", "--secure-port=10257"}, want: "10257", ok: true},
		{name: "separate", args: []string{"--secure-port", "10257"}, want: "10257", ok: true},
		{name: "last wins", args: []string{"--secure-port=1", "--secure-port=2"}, want: "2", ok: true},
		{name: "prefix of another flag", args: []string{"--secure-port-x=1"}},
		{name: "no value", args: []string{"--secure-port"}},
		{name: "absent", args: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := flagValue(tc.args, "--secure-port")
			if got != tc.want || ok != tc.ok {
				t.Errorf("flagValue(%v) = %q, %v; want %q, %v", tc.args, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestQuantileFigure(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name string
		q    float64
		bs   []bucket
		want string
	}{
		{name: "empty", q: .5, want: "n/a"},
		{name: "no observations", q: .5, bs: []bucket{{0.005, 0}, {inf, 0}}, want: "n/a"},
		{name: "in the first bucket: its bound", q: .5, bs: []bucket{{0.005, 90}, {0.025, 100}, {inf, 100}}, want: "≤ 5 ms"},
		{name: "interpolated", q: .99, bs: []bucket{{0.005, 90}, {0.025, 100}, {inf, 100}}, want: "23.00 ms"},
		{name: "past the last finite bucket", q: .99, bs: []bucket{{inf, 100}, {0.001, 10}, {1, 50}}, want: "> 1000 ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := quantileFigure(tc.q, tc.bs); got != tc.want {
				t.Errorf("quantileFigure(%v, %v) = %q, want %q", tc.q, tc.bs, got, tc.want)
			}
		})
	}
}

func TestStatsOf(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	got := statsOf(1.5, 2, ds)
	want := roundStats{Load: 1.5, Want: 2, N: 100, P50: 50 * time.Second, P99: 99 * time.Second, Max: 100 * time.Second}
	if got != want {
		t.Errorf("statsOf = %+v, want %+v", got, want)
	}
	if got := statsOf(0, 0, nil); got.N != 0 || got.Max != 0 {
		t.Errorf("statsOf(nil) = %+v, want zeros", got)
	}
}

func TestPerCall(t *testing.T) {
	got := perCall(map[string]float64{"a": 100, "b": 50, "c": 10}, map[string]float64{"a": 400, "b": 0})
	if want := map[string]float64{"a": 0.25}; !reflect.DeepEqual(got, want) {
		t.Errorf("perCall = %v, want %v", got, want)
	}
}

func TestReadHPA(t *testing.T) {
	h := &autoscalingv2.HorizontalPodAutoscaler{}
	h.Name = "keda-hpa-w-0001"
	h.Spec.ScaleTargetRef.Name = "w-0001"
	h.Status.DesiredReplicas, h.Status.CurrentReplicas = 2, 1
	target, st := readHPA(h)
	if target != "w-0001" || st != (hpaState{Desired: 2, Current: 1}) {
		t.Errorf("readHPA before any read = %q, %+v", target, st)
	}
	h.Status.CurrentMetrics = []autoscalingv2.MetricStatus{{Type: autoscalingv2.ExternalMetricSourceType,
		External: &autoscalingv2.ExternalMetricStatus{Current: autoscalingv2.MetricValueStatus{AverageValue: resource.NewMilliQuantity(500, resource.DecimalSI)}}}}
	if _, st := readHPA(h); !st.HasValue {
		t.Errorf("readHPA with an External value: HasValue false")
	}
}

const kedaBefore = `# TYPE capscale_adapter_keda_request_duration_seconds histogram
capscale_adapter_keda_request_duration_seconds_bucket{method="GetMetrics",le="0.001"} 10
capscale_adapter_keda_request_duration_seconds_bucket{method="GetMetrics",le="0.01"} 10
capscale_adapter_keda_request_duration_seconds_bucket{method="GetMetrics",le="+Inf"} 10
capscale_adapter_keda_request_duration_seconds_sum{method="GetMetrics"} 0.005
capscale_adapter_keda_request_duration_seconds_count{method="GetMetrics"} 10
capscale_adapter_keda_request_duration_seconds_bucket{method="IsActive",le="0.001"} 5
capscale_adapter_keda_request_duration_seconds_bucket{method="IsActive",le="0.01"} 5
capscale_adapter_keda_request_duration_seconds_bucket{method="IsActive",le="+Inf"} 5
capscale_adapter_keda_request_duration_seconds_sum{method="IsActive"} 0.001
capscale_adapter_keda_request_duration_seconds_count{method="IsActive"} 5
# TYPE capscale_adapter_keda_requests_total counter
capscale_adapter_keda_requests_total{method="GetMetrics",code="OK"} 10
capscale_adapter_keda_requests_total{method="IsActive",code="OK"} 5
`

const kedaAfter = `# TYPE capscale_adapter_keda_request_duration_seconds histogram
capscale_adapter_keda_request_duration_seconds_bucket{method="GetMetrics",le="0.001"} 90
capscale_adapter_keda_request_duration_seconds_bucket{method="GetMetrics",le="0.01"} 110
capscale_adapter_keda_request_duration_seconds_bucket{method="GetMetrics",le="+Inf"} 110
capscale_adapter_keda_request_duration_seconds_sum{method="GetMetrics"} 0.2
capscale_adapter_keda_request_duration_seconds_count{method="GetMetrics"} 110
capscale_adapter_keda_request_duration_seconds_bucket{method="IsActive",le="0.001"} 55
capscale_adapter_keda_request_duration_seconds_bucket{method="IsActive",le="0.01"} 55
capscale_adapter_keda_request_duration_seconds_bucket{method="IsActive",le="+Inf"} 55
capscale_adapter_keda_request_duration_seconds_sum{method="IsActive"} 0.01
capscale_adapter_keda_request_duration_seconds_count{method="IsActive"} 55
# TYPE capscale_adapter_keda_requests_total counter
capscale_adapter_keda_requests_total{method="GetMetrics",code="OK"} 109
capscale_adapter_keda_requests_total{method="GetMetrics",code="Unavailable"} 1
capscale_adapter_keda_requests_total{method="IsActive",code="OK"} 55
`

// hpaReads is kube-controller-manager's External read histogram with n
// reads, all within 8 ms, and one Resource read that must not count.
func hpaReads(n int) string {
	return strings.NewReplacer("N", strconv.Itoa(n)).Replace(`# TYPE horizontal_pod_autoscaler_controller_metric_computation_duration_seconds histogram
horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_bucket{action="none",error="none",metric_type="External",le="0.004"} 0
horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_bucket{action="none",error="none",metric_type="External",le="0.008"} N
horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_bucket{action="none",error="none",metric_type="External",le="+Inf"} N
horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_sum{action="none",error="none",metric_type="External"} 0.1
horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_count{action="none",error="none",metric_type="External"} N
horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_bucket{action="none",error="none",metric_type="Resource",le="0.004"} 7
horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_bucket{action="none",error="none",metric_type="Resource",le="0.008"} 7
horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_bucket{action="none",error="none",metric_type="Resource",le="+Inf"} 7
horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_sum{action="none",error="none",metric_type="Resource"} 0.01
horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_count{action="none",error="none",metric_type="Resource"} 7
`)
}

func mustParse(t *testing.T, text string) metricFamilies {
	t.Helper()
	f, err := parseMetrics([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestSteadyFigures(t *testing.T) {
	t0 := time.Unix(1000, 0)
	before := kedaScrape{At: t0, Adapter: mustParse(t, kedaBefore), KCM: mustParse(t, hpaReads(50)),
		CPU: cpuTimes{procAdapter: time.Second, procKEDAOperator: 2 * time.Second, procKEDAAdapter: time.Second}}
	after := kedaScrape{At: t0.Add(10 * time.Second), Adapter: mustParse(t, kedaAfter), KCM: mustParse(t, hpaReads(150)),
		CPU: cpuTimes{procAdapter: 1100 * time.Millisecond, procKEDAOperator: 2500 * time.Millisecond, procKEDAAdapter: 1050 * time.Millisecond}}
	// The adapter idles at 1% of a core: 100 ms of its 200 are idle.
	idle := map[string]float64{procAdapter: 0.01}
	got := steadyFigures(sideKEDA, before, after, idle)
	if got.Calls != 100 || got.HPAReads != 100 || got.Window != 10*time.Second {
		t.Errorf("calls %v, HPA reads %v, window %v; want 100, 100, 10s", got.Calls, got.HPAReads, got.Window)
	}
	if got.P50 != "≤ 1 ms" || got.P99 != "9.55 ms" {
		t.Errorf("GetMetrics p50 %q, p99 %q; want ≤ 1 ms, 9.55 ms", got.P50, got.P99)
	}
	if got.HPAP50 != "6.00 ms" {
		t.Errorf("HPA read p50 %q, want 6.00 ms (External reads only)", got.HPAP50)
	}
	wantCPU := map[string]float64{procAdapter: 0, procKEDAOperator: 5, procKEDAAdapter: 0.5}
	for k, v := range wantCPU {
		if math.Abs(got.CPU[k]-v) > 1e-9 {
			t.Errorf("CPU %s = %v ms per call, want %v", k, got.CPU[k], v)
		}
	}
	if want := map[string]float64{"IsActive": 50}; !reflect.DeepEqual(got.Others, want) {
		t.Errorf("other calls %v, want %v", got.Others, want)
	}

	// The APIService side reads the generic API server's LIST histogram,
	// and without kube-controller-manager's metrics leaves the HPA out.
	apiBefore := mustParse(t, `# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{verb="LIST",group="external.metrics.k8s.io",le="0.005"} 0
apiserver_request_duration_seconds_bucket{verb="LIST",group="external.metrics.k8s.io",le="+Inf"} 0
apiserver_request_duration_seconds_sum{verb="LIST",group="external.metrics.k8s.io"} 0
apiserver_request_duration_seconds_count{verb="LIST",group="external.metrics.k8s.io"} 0
`)
	apiAfter := mustParse(t, `# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{verb="LIST",group="external.metrics.k8s.io",le="0.005"} 40
apiserver_request_duration_seconds_bucket{verb="LIST",group="external.metrics.k8s.io",le="+Inf"} 40
apiserver_request_duration_seconds_sum{verb="LIST",group="external.metrics.k8s.io"} 0.04
apiserver_request_duration_seconds_count{verb="LIST",group="external.metrics.k8s.io"} 40
apiserver_request_duration_seconds_bucket{verb="GET",group="",le="0.005"} 9
apiserver_request_duration_seconds_bucket{verb="GET",group="",le="+Inf"} 9
apiserver_request_duration_seconds_sum{verb="GET",group=""} 0.01
apiserver_request_duration_seconds_count{verb="GET",group=""} 9
`)
	api := steadyFigures(sideAPIService, kedaScrape{At: t0, Adapter: apiBefore}, kedaScrape{At: t0.Add(time.Second), Adapter: apiAfter}, nil)
	if api.Calls != 40 || api.P99 != "≤ 5 ms" || api.HPAP99 != "n/a" || api.Others != nil {
		t.Errorf("APIService side = %+v", api)
	}
}

// The two sides must ask for the same thing: one metric, one target.
func TestBenchObjectsAgree(t *testing.T) {
	hpa := benchHPA(7)
	ext := hpa.Spec.Metrics[0].External
	so := benchScaledObject(7, "127.0.0.1:9443", 30*time.Second)
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	meta := triggers[0].(map[string]any)["metadata"].(map[string]any)
	if meta["metric"] != ext.Metric.Name || ext.Metric.Name != names.LoadIndexMetric {
		t.Errorf("metric: ScaledObject %v, HPA %v", meta["metric"], ext.Metric.Name)
	}
	if meta["source"] != ext.Metric.Selector.MatchLabels["source"] {
		t.Errorf("source: ScaledObject %v, HPA %v", meta["source"], ext.Metric.Selector.MatchLabels)
	}
	if meta["targetValue"] != ext.Target.AverageValue.String() {
		t.Errorf("target: ScaledObject %v, HPA %v", meta["targetValue"], ext.Target.AverageValue)
	}
	if p, _, _ := unstructured.NestedInt64(so.Object, "spec", "pollingInterval"); p != 30 {
		t.Errorf("pollingInterval %d, want 30", p)
	}
	if name, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name"); name != hpa.Spec.ScaleTargetRef.Name {
		t.Errorf("targets differ: %s and %s", name, hpa.Spec.ScaleTargetRef.Name)
	}
}

func TestKEDARows(t *testing.T) {
	all := roundStats{N: 1500, P50: 9 * time.Second, P99: 18500 * time.Millisecond, Max: 19 * time.Second}
	sides := []kedaSide{
		{Name: sideAPIService, Window: time.Minute, Calls: 1200, P50: "≤ 5 ms", P99: "7.50 ms", HPAP50: "3.00 ms", HPAP99: "12.00 ms",
			CPU: map[string]float64{procAdapter: 0.1234}, Rounds: make([]roundStats, 5), All: all},
		{Name: sideKEDA, Window: time.Minute, Calls: 1800, P50: "0.12 ms", P99: "0.90 ms", HPAP50: "20.00 ms", HPAP99: "80.00 ms",
			CPU: map[string]float64{procAdapter: 0.05, procKEDAOperator: 0.8}, Rounds: make([]roundStats, 5), All: all},
	}
	got := kedaRows(300, 30*time.Second, sides)
	want := []row{
		{Measure: "capscale's APIService, 300 HPAs on the same source",
			Figure: "external-metrics LIST at capscale p50 ≤ 5 ms, p99 7.50 ms (1200 calls, 20.0/s); CPU per LIST: capscale 0.123 ms; the HPA controller's read p50 3.00 ms, p99 12.00 ms"},
		{Measure: "KEDA external scaler, 300 ScaledObjects through keda-operator (pollingInterval 30s)",
			Figure: "GetMetrics at capscale p50 0.12 ms, p99 0.90 ms (1800 calls, 30.0/s); CPU per GetMetrics: capscale 0.050 ms, keda-operator 0.800 ms; the HPA controller's read p50 20.00 ms, p99 80.00 ms",
			Goal:   kedaGoal},
		{Measure: "Load change → HPA desired replicas, 300 HPAs, 15s HPA sync",
			Figure: "APIService p50 9.00 s, p99 18.50 s, max 19.00 s; KEDA p50 9.00 s, p99 18.50 s, max 19.00 s (5 rounds × 300 HPAs a side)"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("kedaRows =\n%+v\nwant\n%+v", got, want)
	}
	if got := kedaRows(300, 30*time.Second, nil); len(got) != 0 {
		t.Errorf("no sides gave rows: %+v", got)
	}
}
