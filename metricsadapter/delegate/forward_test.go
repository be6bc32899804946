package delegate

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/metricsadapter/apiservice"
)

// testCA is the plane's CA (e2e/plane), issuing serving certificates for
// the delegate's Service name.
type testCA struct {
	*plane.CA
	pem []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	ca, err := plane.NewCA(t.TempDir(), "ca", "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{CA: ca, pem: ca.CAData()}
}

func (ca *testCA) serving(t *testing.T, dnsName string) tls.Certificate {
	t.Helper()
	pair, err := ca.Issue(t.TempDir(), "serving", plane.CertSpec{CommonName: dnsName, DNSNames: []string{dnsName}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

const okList = `{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1","metadata":{},` +
	`"items":[{"metricName":"queue-length","metricLabels":{"queue":"orders"},"timestamp":"2026-11-23T12:00:00Z","value":"42"}]}`

// startDelegate serves handler with a certificate of ca for the Service
// keda/keda-metrics, and returns a Forwarder dialling it.
func startDelegate(t *testing.T, serverCA, trustedCA *testCA, handler http.HandlerFunc, timeout time.Duration, maxBytes int64) (*Forwarder, *Metrics) {
	t.Helper()
	srv := httptest.NewUnstartedServer(handler)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCA.serving(t, "keda-metrics.keda.svc")}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	m := NewMetrics()
	addr := srv.Listener.Addr().String()
	f, err := NewForwarder(ForwarderOptions{
		Target:      apiservice.Target{Namespace: "keda", Name: "keda-metrics", Port: 443, CABundle: trustedCA.pem},
		Credentials: &rest.Config{BearerToken: "capscale-token"},
		Addresses:   func() ([]string, error) { return []string{addr}, nil },
		Timeout:     timeout, MaxBytes: maxBytes, Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, m
}

func TestForwarderPassesAnswersThrough(t *testing.T) {
	ca := newTestCA(t)
	var gotPath, gotQuery, gotAuth string
	f, m := startDelegate(t, ca, ca, func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery, gotAuth = r.URL.Path, r.URL.Query().Get("labelSelector"), r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/missing") {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no metric missing","reason":"NotFound","code":404}`))
			return
		}
		_, _ = w.Write([]byte(okList))
	}, 2*time.Second, 1<<20)

	sel := labels.SelectorFromSet(labels.Set{"queue": "orders"})
	list, err := f.Get(context.Background(), "shop", "queue-length", sel)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Value.Value() != 42 || list.Items[0].MetricLabels["queue"] != "orders" ||
		!list.Items[0].Timestamp.Time.Equal(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("list = %+v, want the delegate's item unchanged", list.Items)
	}
	if gotPath != "/apis/external.metrics.k8s.io/v1beta1/namespaces/shop/queue-length" || gotQuery != "queue=orders" || gotAuth != "Bearer capscale-token" {
		t.Errorf("delegate saw path %q selector %q auth %q", gotPath, gotQuery, gotAuth)
	}

	_, err = f.Get(context.Background(), "shop", "missing", labels.Everything())
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "no metric missing") {
		t.Errorf("the delegate's 404 Status: got %v, want it unchanged", err)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("200")); got != 1 {
		t.Errorf("requests{code=200} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("404")); got != 1 {
		t.Errorf("requests{code=404} = %v, want 1", got)
	}
}

// TestForwarderFailures: each way of not getting an answer is a 503 Status
// naming the delegate and the reason, never a value.
func TestForwarderFailures(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	tests := []struct {
		name     string
		serverCA *testCA
		handler  http.HandlerFunc
		maxBytes int64
		wantCode int32
		want     string
	}{
		{name: "timeout", serverCA: ca, handler: func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, wantCode: 503, want: "did not answer within 200ms"},
		{name: "5xx without a Status", serverCA: ca, handler: func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "upstream connect error", http.StatusBadGateway)
		}, wantCode: 503, want: "answered HTTP 502 without a Status"},
		{name: "5xx Status passes through", serverCA: ca, handler: func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"scaler failed","reason":"InternalError","code":500}`))
		}, wantCode: 500, want: "scaler failed"},
		{name: "oversized body", serverCA: ca, maxBytes: 64, handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(okList))
		}, wantCode: 503, want: "larger than 64 bytes"},
		{name: "not a list", serverCA: ca, handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`<html>`))
		}, wantCode: 503, want: "not an ExternalMetricValueList"},
		{name: "untrusted certificate", serverCA: other, handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(okList))
		}, wantCode: 503, want: "does not verify against the recorded CA bundle"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			maxBytes := tc.maxBytes
			if maxBytes == 0 {
				maxBytes = 1 << 20
			}
			f, m := startDelegate(t, tc.serverCA, ca, tc.handler, 200*time.Millisecond, maxBytes)
			list, err := f.Get(context.Background(), "shop", "queue-length", labels.Everything())
			var se apierrors.APIStatus
			if list != nil || err == nil || !errorsAs(err, &se) {
				t.Fatalf("Get = %+v, %v; want a Status error", list, err)
			}
			if se.Status().Code != tc.wantCode || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Status %d %q, want %d containing %q", se.Status().Code, err.Error(), tc.wantCode, tc.want)
			}
			if tc.wantCode == 503 && !strings.Contains(err.Error(), "delegate keda/keda-metrics:443") {
				t.Errorf("%q does not name the delegate", err.Error())
			}
			if got := testutil.ToFloat64(m.requests.WithLabelValues(itoa(tc.wantCode))); got != 1 {
				t.Errorf("requests{code=%d} = %v, want 1", tc.wantCode, got)
			}
		})
	}
}

func TestForwarderUnreachable(t *testing.T) {
	ca := newTestCA(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	f, err := NewForwarder(ForwarderOptions{Target: apiservice.Target{Namespace: "keda", Name: "keda-metrics", Port: 443, CABundle: ca.pem},
		Addresses: func() ([]string, error) { return []string{addr}, nil }, Timeout: time.Second, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Get(context.Background(), "shop", "q", labels.Everything())
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("Get = %v, want a 503 saying the delegate is unreachable", err)
	}
	f.addrs = func() ([]string, error) {
		return nil, errString("Service keda/keda-metrics has no ready endpoint for port 443")
	}
	_, err = f.Get(context.Background(), "shop", "q", labels.Everything())
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "no ready endpoint") {
		t.Errorf("Get = %v, want a 503 naming the missing endpoints", err)
	}
}

// lateAnswer hands over an empty 200 only after the request's deadline, as
// net/http can when the answer races the cancel.
type lateAnswer struct{}

func (lateAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// TestForwarderAnswerAfterDeadline: an answer that arrives past the timeout
// is a timeout, never a value and never "not a list".
func TestForwarderAnswerAfterDeadline(t *testing.T) {
	ca := newTestCA(t)
	f, m := startDelegate(t, ca, ca, func(http.ResponseWriter, *http.Request) {}, 50*time.Millisecond, 1<<20)
	f.client = &http.Client{Transport: lateAnswer{}}
	_, err := f.Get(context.Background(), "shop", "queue-length", labels.Everything())
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "did not answer within 50ms") {
		t.Errorf("Get = %v, want a 503 saying the delegate did not answer in time", err)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("503")); got != 1 {
		t.Errorf("requests{code=503} = %v, want 1", got)
	}
}
