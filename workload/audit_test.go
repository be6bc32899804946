package workload

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
)

// syncBuffer is written by klog on server goroutines and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestAuditLog(t *testing.T) {
	var out syncBuffer
	klog.LogToStderr(false)
	klog.SetOutput(&out)
	t.Cleanup(func() {
		klog.Flush()
		klog.SetOutput(os.Stderr)
		klog.LogToStderr(true)
	})

	e := newEnv(t, deployment("ns", "web", 2))
	e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/stop", "alice", "", nil)
	e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/restart", "", "", nil)
	e.do(http.MethodGet, "/v1/namespaces/ns/deployments/web/rollout", "alice", "", nil)
	klog.Flush()

	var audit []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, `"Audit"`) {
			audit = append(audit, l)
		}
	}
	if len(audit) != 2 {
		t.Fatalf("want one audit line per mutation attempt (2), got %d:\n%s", len(audit), strings.Join(audit, "\n"))
	}
	for i, want := range [][]string{
		{`verb="stop"`, `resource="deployments"`, `namespace="ns"`, `name="web"`, `code=200`},
		{`verb="restart"`, `code=401`},
	} {
		for _, w := range want {
			if !strings.Contains(audit[i], w) {
				t.Errorf("audit line %q lacks %s", audit[i], w)
			}
		}
	}
	if strings.Contains(out.String(), "tok-alice") {
		t.Error("the bearer token appears in the log")
	}

	want := `
# HELP capscale_workload_mutations_total Mutating workload API requests, by action (restart, stop, start, scale, elasticweb-apply) and result (HTTP status code).
# TYPE capscale_workload_mutations_total counter
capscale_workload_mutations_total{action="restart",result="401"} 1
capscale_workload_mutations_total{action="stop",result="200"} 1
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "capscale_workload_mutations_total"); err != nil {
		t.Error(err)
	}
}

// TestInflightLimit: past MaxInflight concurrent /v1 requests, the API
// answers 429 at once instead of queueing more calls for the apiserver.
func TestInflightLimit(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	cs := fake.NewClientset()
	srv := New(Config{
		ClientFor: func(string) (kubernetes.Interface, error) {
			entered <- struct{}{}
			<-release
			return cs, nil
		},
		Informers: informers.NewSharedInformerFactory(cs, 0), MaxInflight: 1,
	})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	get := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+"/v1/namespaces/ns/deployments/web/rollout", nil)
		req.Header.Set("Authorization", "Bearer any")
		return http.DefaultClient.Do(req)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := get()
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-entered
	resp, err := get()
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second request: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
