package kedascaler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/metrics/pkg/apis/external_metrics"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/metricsadapter/provider"
	"github.com/capscale/capscale/metricsadapter/source"
)

const serverName = "capscale-metrics-adapter.capscale-system.svc"

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// testCA is the plane's CA (e2e/plane), with the calls these tests make.
type testCA struct {
	*plane.CA
	file string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	ca, err := plane.NewCA(t.TempDir(), name, name)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{CA: ca, file: ca.CertFile}
}

// issue returns cert and key files for a server (DNS name and 127.0.0.1)
// or a client certificate.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certFile, keyFile string) {
	t.Helper()
	spec := plane.CertSpec{CommonName: cn, Client: !server, Server: server}
	if server {
		spec.DNSNames, spec.IPs = []string{cn}, []net.IP{net.ParseIP("127.0.0.1")}
	}
	pair, err := ca.Issue(t.TempDir(), "tls", spec)
	if err != nil {
		t.Fatal(err)
	}
	return pair.CertFile, pair.KeyFile
}

// sources serves gpu-load from a settable value and stale-load as a
// source past its maxAge.
type sources struct {
	mu  sync.Mutex
	gpu float64
}

func (s *sources) set(v float64) {
	s.mu.Lock()
	s.gpu = v
	s.mu.Unlock()
}

func (s *sources) Read(name string) (source.Reading, error) {
	switch name {
	case "gpu-load":
		s.mu.Lock()
		defer s.mu.Unlock()
		return source.Reading{Value: s.gpu, Time: now}, nil
	case "stale-load":
		return source.Reading{}, &source.UnavailableError{Source: name, Age: 5 * time.Minute, MaxAge: 2 * time.Minute}
	}
	return source.Reading{}, fmt.Errorf("%w %q", source.ErrUnknownSource, name)
}

// countingProvider counts reads, so a test knows a stream has evaluated.
type countingProvider struct {
	cmprovider.ExternalMetricsProvider
	reads atomic.Int64
}

func (c *countingProvider) GetExternalMetric(ctx context.Context, ns string, sel labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	defer c.reads.Add(1)
	return c.ExternalMetricsProvider.GetExternalMetric(ctx, ns, sel, info)
}

// fixture is a running scaler over capscale's real provider (fake
// clientset: Deployment shop/web wants ceil(250/100) = 3 replicas).
type fixture struct {
	provider *countingProvider
	sources  *sources
	clock    *clocktesting.FakeClock
	metrics  *Metrics
	ca       *testCA
	addr     string
	stop     func()
}

type fixtureOptions struct {
	clientCA   bool
	maxStreams int
}

func startFixture(t *testing.T, o fixtureOptions) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	replicas := int32(2)
	cs := fake.NewClientset(&appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{
			names.SinglePodQPSAnnotation: "100", names.TotalQPSAnnotation: "250"}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	})
	inf := kube.InformerFactory(cs)
	srcs := &sources{gpu: 0.83}
	clk := clocktesting.NewFakeClock(now)
	p, err := provider.New(provider.Options{Informers: inf, Sources: srcs, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx.Done())
	t.Cleanup(func() { cancel(); inf.Shutdown() })
	inf.WaitForCacheSync(ctx.Done())

	ca := newTestCA(t, "capscale-ca")
	certFile, keyFile := ca.issue(t, serverName, true)
	opts := Options{CertFile: certFile, KeyFile: keyFile, StreamInterval: 5 * time.Second, MaxStreams: o.maxStreams, Clock: clk}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = 10
	}
	if o.clientCA {
		opts.ClientCAFile = ca.file
	}
	f := &fixture{provider: &countingProvider{ExternalMetricsProvider: p}, sources: srcs, clock: clk, metrics: NewMetrics(), ca: ca}
	s, err := New(f.provider, opts, f.metrics)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.serve(sctx, l) }()
	var once sync.Once
	f.stop = func() {
		once.Do(func() {
			scancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(f.stop)
	return f
}

// client dials the fixture as KEDA does, trusting its CA, with a client
// certificate from clientCA if given.
func (f *fixture) client(t *testing.T, clientCA *testCA) pb.ExternalScalerClient {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(f.ca.Cert)
	cfg := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if clientCA != nil {
		certFile, keyFile := clientCA.issue(t, "keda-operator", false)
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewExternalScalerClient(conn)
}

func ref(md map[string]string) *pb.ScaledObjectRef {
	return &pb.ScaledObjectRef{Name: "web-scaler", Namespace: "shop", ScalerMetadata: md}
}
