package kedascaler

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/labels"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

var (
	loadIndex  = map[string]string{"scalerAddress": "capscale-metrics-adapter.capscale-system.svc:9443", "metric": "capscale-load-index", "source": "gpu-load", "targetValue": "0.7", "activationThreshold": "0.5"}
	qpsDesired = map[string]string{"metric": "capscale-desired-replicas", "workload": "web", "policy": "qps"}
)

// TestScalerServesTheProvidersValues: every answer is the value the
// external-metrics API gives for the same metric and labels.
func TestScalerServesTheProvidersValues(t *testing.T) {
	f := startFixture(t, fixtureOptions{clientCA: true})
	c := f.client(t, f.ca)
	ctx := context.Background()

	for _, tc := range []struct {
		name       string
		md         map[string]string
		selector   string
		want       float64
		wantTarget float64
		wantActive bool
	}{
		{name: "load index", md: loadIndex, selector: "source=gpu-load", want: 0.83, wantTarget: 0.7, wantActive: true},
		{name: "QPS desired replicas", md: qpsDesired, selector: "workload=web,policy=qps", want: 3, wantTarget: 1, wantActive: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := labels.Parse(tc.selector)
			if err != nil {
				t.Fatal(err)
			}
			api, err := f.provider.GetExternalMetric(ctx, "shop", sel, cmprovider.ExternalMetricInfo{Metric: tc.md["metric"]})
			if err != nil {
				t.Fatalf("the external-metrics API's answer: %v", err)
			}
			if got := api.Items[0].Value.AsApproximateFloat64(); got != tc.want {
				t.Fatalf("the external-metrics API says %v, the test expects %v", got, tc.want)
			}

			spec, err := c.GetMetricSpec(ctx, ref(tc.md))
			if err != nil {
				t.Fatalf("GetMetricSpec: %v", err)
			}
			if len(spec.MetricSpecs) != 1 || spec.MetricSpecs[0].MetricName != tc.md["metric"] || spec.MetricSpecs[0].TargetSizeFloat != tc.wantTarget {
				t.Errorf("GetMetricSpec = %v, want one spec %s with target %v", spec.MetricSpecs, tc.md["metric"], tc.wantTarget)
			}
			m, err := c.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref(tc.md), MetricName: tc.md["metric"]})
			if err != nil {
				t.Fatalf("GetMetrics: %v", err)
			}
			if len(m.MetricValues) != 1 || m.MetricValues[0].MetricValueFloat != tc.want || m.MetricValues[0].MetricName != tc.md["metric"] {
				t.Errorf("GetMetrics = %v, want one value %v", m.MetricValues, tc.want)
			}
			a, err := c.IsActive(ctx, ref(tc.md))
			if err != nil || a.Result != tc.wantActive {
				t.Errorf("IsActive = %v, %v; want %v", a, err, tc.wantActive)
			}
		})
	}

	// Below the activation threshold the trigger is inactive.
	f.sources.set(0.2)
	if a, err := c.IsActive(ctx, ref(loadIndex)); err != nil || a.Result {
		t.Errorf("IsActive at 0.2 with activationThreshold 0.5 = %v, %v; want false", a, err)
	}
	if got := testutil.ToFloat64(f.metrics.requests.WithLabelValues("GetMetrics", "OK")); got != 2 {
		t.Errorf(`capscale_adapter_keda_requests_total{method="GetMetrics",code="OK"} = %v, want 2`, got)
	}
	if got := testutil.CollectAndCount(f.metrics.duration); got != 3 {
		t.Errorf("capscale_adapter_keda_request_duration_seconds has %d series, want 3 (one per unary method)", got)
	}
}

// TestScalerErrors: what the external-metrics API refuses is a gRPC error
// with the same meaning and message, never a value of 0.
func TestScalerErrors(t *testing.T) {
	f := startFixture(t, fixtureOptions{})
	c := f.client(t, nil)
	ctx := context.Background()
	with := func(md map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range md {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(out, kv[i])
			} else {
				out[kv[i]] = kv[i+1]
			}
		}
		return out
	}
	tests := []struct {
		name   string
		md     map[string]string
		metric string // GetMetrics' metricName; md["metric"] if empty
		code   codes.Code
		want   string
	}{
		{name: "stale source", md: with(loadIndex, "source", "stale-load"), code: codes.Unavailable, want: `source "stale-load": last good sample is 5m0s old, more than maxAge 2m0s`},
		{name: "unknown metric", md: with(loadIndex, "metric", "queue-length"), code: codes.NotFound, want: "queue-length"},
		{name: "unknown source", md: with(loadIndex, "source", "cpu-load"), code: codes.NotFound, want: "cpu-load"},
		{name: "unknown workload", md: with(qpsDesired, "workload", "api"), code: codes.NotFound, want: `no Deployment or StatefulSet "api" in namespace "shop"`},
		{name: "no step policy", md: with(qpsDesired, "policy", "load-step"), code: codes.NotFound, want: "no step policy for workload"},
		{name: "missing label", md: with(qpsDesired, "policy", ""), code: codes.InvalidArgument, want: "missing label policy"},
		{name: "label of another metric", md: with(qpsDesired, "source", "gpu-load"), code: codes.InvalidArgument, want: `unexpected label "source"`},
		{name: "bad policy", md: with(qpsDesired, "policy", "fast"), code: codes.InvalidArgument, want: `label policy must be "qps" or "load-step"`},
		{name: "no metric", md: with(loadIndex, "metric", ""), metric: "capscale-load-index", code: codes.InvalidArgument, want: `trigger metadata "metric": missing`},
		{name: "bad target", md: with(loadIndex, "targetValue", "-1"), code: codes.InvalidArgument, want: `trigger metadata "targetValue"`},
		{name: "another metric name", md: loadIndex, metric: "s0-capscale-load-index", code: codes.NotFound, want: `metric "s0-capscale-load-index" is not this trigger's`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.metric
			if name == "" {
				name = tc.md["metric"]
			}
			m, err := c.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref(tc.md), MetricName: name})
			checkStatus(t, "GetMetrics", m, err, tc.code, tc.want)
			if tc.metric != "" {
				return // a wrong metricName is GetMetrics' own check
			}
			a, err := c.IsActive(ctx, ref(tc.md))
			checkStatus(t, "IsActive", a, err, tc.code, tc.want)
		})
	}
	_, err := c.IsActive(ctx, &pb.ScaledObjectRef{Name: "x", ScalerMetadata: qpsDesired})
	checkStatus(t, "IsActive without namespace", nil, err, codes.InvalidArgument, "no namespace")
	_, err = c.GetMetricSpec(ctx, ref(map[string]string{"metric": "capscale-load-index"}))
	checkStatus(t, "GetMetricSpec without target", nil, err, codes.InvalidArgument, "targetValue")
}

func checkStatus(t *testing.T, call string, resp any, err error, code codes.Code, want string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), want) || !strings.Contains(st.Message(), "ScaledObject shop/web-scaler") && code != codes.InvalidArgument {
		t.Errorf("%s = %v, %v; want %s containing %q and naming the ScaledObject", call, resp, err, code, want)
	}
}

// TestScalerClientCertificates: with a client CA, only a client with a
// certificate it signed gets an answer.
func TestScalerClientCertificates(t *testing.T) {
	f := startFixture(t, fixtureOptions{clientCA: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		ca   *testCA
		ok   bool
	}{
		{name: "no client certificate", ca: nil},
		{name: "certificate of another CA", ca: newTestCA(t, "other-ca")},
		{name: "certificate of the client CA", ca: f.ca, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.client(t, tc.ca).IsActive(ctx, ref(qpsDesired))
			if tc.ok != (err == nil) {
				t.Errorf("IsActive: %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok && status.Code(err) != codes.Unavailable {
				t.Errorf("IsActive: %v, want the handshake to fail (Unavailable)", err)
			}
		})
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	p := &countingProvider{}
	ca := newTestCA(t, "ca")
	cert, key := ca.issue(t, serverName, true)
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{name: "no stream interval", o: Options{CertFile: cert, KeyFile: key, MaxStreams: 1}, want: "positive stream interval"},
		{name: "no streams", o: Options{CertFile: cert, KeyFile: key, StreamInterval: time.Second}, want: "stream limit"},
		{name: "missing certificate", o: Options{CertFile: cert + ".missing", KeyFile: key, StreamInterval: time.Second, MaxStreams: 1}, want: "serving certificate"},
		{name: "key of another certificate", o: Options{CertFile: cert, KeyFile: func() string { _, k := ca.issue(t, "x", true); return k }(), StreamInterval: time.Second, MaxStreams: 1}, want: "serving certificate"},
		{name: "missing client CA", o: Options{CertFile: cert, KeyFile: key, ClientCAFile: ca.file + ".missing", StreamInterval: time.Second, MaxStreams: 1}, want: "client CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(p, tc.o, NewMetrics()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
