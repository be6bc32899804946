//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// kedaClient dials the adapter's external scaler as KEDA does (a
// TriggerAuthentication's caCert, tlsClientCert, tlsClientKey), with a
// client certificate from ca, or none when ca is nil.
func kedaClient(t *testing.T, s *stack.Stack, addr string, ca *plane.CA) pb.ExternalScalerClient {
	t.Helper()
	pemCA, err := os.ReadFile(s.PKI.ClusterCA.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemCA)
	cfg := &tls.Config{RootCAs: roots, ServerName: stack.AdapterService + "." + stack.Namespace + ".svc", MinVersion: tls.VersionTLS12}
	if ca != nil {
		pair, err := ca.Issue(t.TempDir(), "keda-operator", plane.CertSpec{CommonName: "keda-operator", Client: true})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewExternalScalerClient(conn)
}

// TestKEDAScaler (issue 10, part 2): KEDA's generated client calls the
// running adapter's external scaler and gets, for each of capscale's
// metrics, the value the external-metrics API serves through the
// aggregator; an unknown metric and a stale source are gRPC errors, never
// 0; only a client certificate of the configured CA gets an answer.
func TestKEDAScaler(t *testing.T) {
	port, err := plane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// KEDA's client certificates come from the front-proxy CA here, so that
	// a cluster-CA certificate (kubectl's admin) is refused.
	s, src := startAdapterStack(t, 0.65, func(o *stack.Options) {
		o.Prepare = func(_ context.Context, s *stack.Stack) error {
			s.Opts.AdapterArgs = append(s.Opts.AdapterArgs, "--keda-scaler-bind-address="+addr,
				"--keda-scaler-client-ca-file="+s.PKI.FrontProxy.CertFile, "--keda-scaler-stream-interval=1s")
			return nil
		}
	})
	ctx := testContext(t, 4*time.Minute)
	keda := kedaClient(t, s, addr, s.PKI.FrontProxy)

	web := SimpleDeployment(adapterNS, "web", 1, nil)
	web.Annotations = map[string]string{names.SinglePodQPSAnnotation: "500", names.TotalQPSAnnotation: "800"}
	for _, dep := range []*appsv1.Deployment{web, SimpleDeployment(adapterNS, "gpu", 1, nil)} {
		if _, err := s.Client.AppsV1().Deployments(adapterNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	triggers := []struct {
		name     string
		md       map[string]string
		selector string
		want     float64
		target   float64
	}{
		{name: "load index", md: map[string]string{"metric": names.LoadIndexMetric, "source": "gpu-load", "targetValue": "0.5"},
			selector: "source=gpu-load", want: 0.65, target: 0.5},
		{name: "QPS desired replicas", md: map[string]string{"metric": names.DesiredReplicasMetric, "workload": "web", "policy": "qps"},
			selector: "workload=web,policy=qps", want: 2, target: 1},
		// 0.65 is between the thresholds: the count is clamped to min 4.
		{name: "load-step desired replicas", md: map[string]string{"metric": names.DesiredReplicasMetric, "workload": "gpu", "policy": "load-step"},
			selector: "workload=gpu,policy=load-step", want: 4, target: 1},
	}
	ref := func(md map[string]string) *pb.ScaledObjectRef {
		all := map[string]string{"scalerAddress": addr, "enableTLS": "true"} // KEDA sends its own keys too
		for k, v := range md {
			all[k] = v
		}
		return &pb.ScaledObjectRef{Name: "so", Namespace: adapterNS, ScalerMetadata: all}
	}
	for _, tc := range triggers {
		t.Run(tc.name, func(t *testing.T) {
			var api float64
			var last error
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
				l, err := externalMetric(ctx, s, tc.md["metric"], tc.selector)
				if err != nil || len(l.Items) != 1 {
					last = err
					return false, nil
				}
				api = l.Items[0].Value.AsApproximateFloat64()
				return math.Abs(api-tc.want) < 1e-9, nil
			})
			if err != nil {
				t.Fatalf("external-metrics API: %s{%s} = %v, want %v: %v (last error %v)", tc.md["metric"], tc.selector, api, tc.want, err, last)
			}
			spec, err := keda.GetMetricSpec(ctx, ref(tc.md))
			if err != nil || len(spec.MetricSpecs) != 1 || spec.MetricSpecs[0].MetricName != tc.md["metric"] || spec.MetricSpecs[0].TargetSizeFloat != tc.target {
				t.Fatalf("GetMetricSpec = %v, %v; want %s with target %v", spec, err, tc.md["metric"], tc.target)
			}
			m, err := keda.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref(tc.md), MetricName: tc.md["metric"]})
			if err != nil || len(m.MetricValues) != 1 || math.Abs(m.MetricValues[0].MetricValueFloat-api) > 1e-9 {
				t.Fatalf("GetMetrics = %v, %v; want the external-metrics API's %v", m, err, api)
			}
			if a, err := keda.IsActive(ctx, ref(tc.md)); err != nil || !a.Result {
				t.Errorf("IsActive = %v, %v; want true at %v", a, err, api)
			}
		})
	}

	// An unknown metric: NotFound naming it, as the API's 404.
	_, err = keda.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref(map[string]string{"metric": "queue-length", "targetValue": "5"}), MetricName: "queue-length"})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "queue-length") {
		t.Errorf("unknown metric: GetMetrics = %v, want NotFound naming queue-length", err)
	}

	// Only KEDA's CA: no certificate, or a cluster-CA one, is refused.
	for name, ca := range map[string]*plane.CA{"no client certificate": nil, "a certificate of another CA": s.PKI.ClusterCA} {
		if _, err := kedaClient(t, s, addr, ca).IsActive(ctx, ref(triggers[1].md)); err == nil {
			t.Errorf("%s: IsActive answered", name)
		}
	}

	// A stream pushes the current answer at once.
	stream, err := keda.StreamIsActive(ctx, ref(triggers[0].md))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || !r.Result {
		t.Fatalf("StreamIsActive: first message %v, %v; want active", r, err)
	}

	// The source stops: past maxAge (8s) the API answers 503, and the
	// scaler Unavailable for the load index and the load-step count that
	// reads it, never 0; the open stream ends with Unavailable too.
	src.SetDown(true)
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := externalMetric(ctx, s, names.LoadIndexMetric, "source=gpu-load")
		return err != nil && strings.Contains(err.Error(), "503"), nil
	})
	if err != nil {
		t.Fatalf("the load index did not turn stale after maxAge: %v", err)
	}
	for _, tc := range []int{0, 2} {
		md := triggers[tc].md
		m, err := keda.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: md["metric"]})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), `source "gpu-load"`) {
			t.Errorf("%s with a stale source: GetMetrics = %v, %v; want Unavailable naming the source", triggers[tc].name, m, err)
		}
		if a, err := keda.IsActive(ctx, ref(md)); status.Code(err) != codes.Unavailable {
			t.Errorf("%s with a stale source: IsActive = %v, %v; want Unavailable", triggers[tc].name, a, err)
		}
	}
	if r, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the stream with a stale source: Recv = %v, %v; want it ended with Unavailable", r, err)
	}
	// The QPS count does not read the source: still served.
	if m, err := keda.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref(triggers[1].md), MetricName: names.DesiredReplicasMetric}); err != nil || m.MetricValues[0].MetricValueFloat != 2 {
		t.Errorf("QPS desired replicas with the source down: %v, %v; want 2", m, err)
	}
}
