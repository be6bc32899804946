package workload

import (
	"bytes"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
		{`user="alice"`, `verb="stop"`, `resource="deployments"`, `namespace="ns"`, `name="web"`, `code=200`},
		{`user=""`, `verb="restart"`, `code=401`},
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
