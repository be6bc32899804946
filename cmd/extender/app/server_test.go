package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	certutil "k8s.io/client-go/util/cert"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/internal/names"
)

// startServer runs the extender over a fake API server until the test ends
// and returns its base URL once /readyz answers 200.
func startServer(t *testing.T, o *Options, client *http.Client, scheme string) string {
	t.Helper()
	cs := fake.NewClientset(
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{names.UnderlayIPCapacityAnnotation: "1"}}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
		&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"}, Spec: v1.PodSpec{NodeName: "a",
			Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{
				v1.ResourceName(names.UnderlayIPResource): resource.MustParse("1")}}}}}},
	)
	c, err := o.ConfigWithClient(cs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, base := serveConfig(t, c, scheme)
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("never ready: %v", err)
	}
	return base
}

func TestRunServesUntilCancelled(t *testing.T) {
	o := NewOptions()
	o.BindAddress = "127.0.0.1:0"
	base := startServer(t, o, http.DefaultClient, "http")

	args := `{"Pod":{"metadata":{"name":"q","namespace":"ns","uid":"q"},"spec":{"containers":[{"name":"c","resources":{"limits":{"capscale.io/underlay-ip":"1"}}}]}},"NodeNames":["a","b"]}`
	resp, err := http.Post(base+"/filter", "application/json", strings.NewReader(args))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res extenderv1.ExtenderFilterResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	// a is full; b has room, so a needs no reason.
	if res.NodeNames == nil || strings.Join(*res.NodeNames, ",") != "b" || len(res.FailedNodes) != 0 {
		t.Errorf("filter result %+v", res)
	}

	resp, err = http.Get(base + "/capacity")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep extender.Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Capacity != 11 || rep.Totals.Used != 1 || rep.DefaultCapacity != 10 {
		t.Errorf("capacity report %+v", rep)
	}

	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"go_goroutines", "process_", "capscale_extender_used_ips 1", `capscale_extender_http_requests_total{code="200",route="filter"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestRunServesTLS(t *testing.T) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	o := NewOptions()
	o.BindAddress = "127.0.0.1:0"
	o.TLSCertFile, o.TLSPrivateKeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(o.TLSCertFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(o.TLSPrivateKeyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	t.Cleanup(client.CloseIdleConnections)
	base := startServer(t, o, client, "https")
	resp, err := client.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz over TLS: %d", resp.StatusCode)
	}
}

func TestRunFailsWhenTheAddressIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o := NewOptions()
	o.BindAddress = ln.Addr().String()
	done := make(chan error, 1)
	go func() { done <- runWithClient(context.Background(), o, fake.NewClientset(), nil) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "listening") {
			t.Errorf("Run = %v, want a listen error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run hung after failing to listen")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestProbePortServesOnlyProbesAndMetrics(t *testing.T) {
	o := NewOptions()
	o.BindAddress = "127.0.0.1:0"
	o.ProbeBindAddress = freeAddr(t)
	startServer(t, o, http.DefaultClient, "http")
	probe := "http://" + o.ProbeBindAddress
	tests := []struct {
		method, path string
		want         int
	}{
		{"GET", "/healthz", 200},
		{"GET", "/readyz", 200},
		{"GET", "/metrics", 200},
		{"POST", "/bind", 404},
		{"POST", "/filter", 404},
		{"POST", "/prioritize", 404},
		{"POST", "/preempt", 404},
		{"GET", "/capacity", 404},
		{"POST", "/metrics", 404},
	}
	for _, tc := range tests {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, probe+tc.path, strings.NewReader("{}"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s on the probe port: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
			}
		})
	}
}

func TestRunFailsWhenTheProbeAddressIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o := NewOptions()
	o.BindAddress = "127.0.0.1:0"
	o.ProbeBindAddress = ln.Addr().String()
	done := make(chan error, 1)
	go func() { done <- runWithClient(context.Background(), o, fake.NewClientset(), nil) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "probe server") {
			t.Errorf("Run = %v, want a probe server error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run kept running without its probe port")
	}
}

// serveConfig runs c until the test ends and returns the context it runs
// under and its base URL (scheme://address) once it listens.
func serveConfig(t *testing.T, c *Config, scheme string) (context.Context, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	c.Listening = func(a net.Addr) { addrc <- a }
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("server did not shut down")
		}
	})
	select {
	case a := <-addrc:
		return ctx, scheme + "://" + a.String()
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	return nil, ""
}

// runWithClient is what the command does after connecting: Config, then Run.
func runWithClient(ctx context.Context, o *Options, cs kubernetes.Interface, listening func(net.Addr)) error {
	c, err := o.ConfigWithClient(cs)
	if err != nil {
		return err
	}
	c.Listening = listening
	return c.Run(ctx)
}

// TestMaxProcs: the binary's path (Config) carries --max-procs to Run, which
// sets it; a test's in-process extender (ConfigWithClient) leaves it alone.
func TestMaxProcs(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.Kubeconfig = kubeconfig
	c, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxProcs != 1 {
		t.Errorf("Config().MaxProcs = %d, want the default 1", c.MaxProcs)
	}
	if c, err := o.ConfigWithClient(fake.NewClientset()); err != nil || c.MaxProcs != 0 {
		t.Errorf("ConfigWithClient().MaxProcs = %v (err %v), want 0", c, err)
	}

	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	want := prev + 1
	c, err = o.ConfigWithClient(fake.NewClientset())
	if err != nil {
		t.Fatal(err)
	}
	c.MaxProcs = want
	o.BindAddress = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	listening := make(chan struct{})
	c.Listening = func(net.Addr) { close(listening) }
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	got := runtime.GOMAXPROCS(0)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if got != want {
		t.Errorf("GOMAXPROCS after Run started = %d, want %d", got, want)
	}
}
