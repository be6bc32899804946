package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/extender/extendertest/fakecluster"
	"github.com/capscale/capscale/internal/httpserver"
)

type testServer struct {
	*httptest.Server
	env   *fakecluster.Cluster
	m     *extender.Metrics
	reg   *prometheus.Registry
	ready atomic.Bool
}

// newTestServer serves the extender API over 127.0.0.1 on top of a fake API
// server holding objs.
func newTestServer(t *testing.T, maxBytes int64, objs ...runtime.Object) *testServer {
	t.Helper()
	ts := &testServer{reg: prometheus.NewRegistry()}
	ts.m = extender.NewMetrics(ts.reg)
	ts.env = fakecluster.New(t, ts.m, objs...)
	extender.RegisterLedger(ts.reg, ts.env.Ledger)
	ts.ready.Store(true)
	ts.Server = httptest.NewServer(NewHandler(HandlerOptions{
		Ledger: ts.env.Ledger, Binder: ts.env.Binder, Metrics: ts.m,
		Ready:           func() bool { return ts.ready.Load() && ts.env.Synced() },
		MaxRequestBytes: maxBytes, Registerer: ts.reg, Gatherer: ts.reg,
	}))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *testServer) post(t *testing.T, path string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(ts.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

func (ts *testServer) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(ts.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wireNames lists the nodes a filter response kept, decoded the way
// kube-scheduler decodes it.
func wireNames(r *extenderv1.ExtenderFilterResult) []string {
	out := []string{}
	if r.NodeNames != nil {
		return append(out, *r.NodeNames...)
	}
	for _, n := range r.Nodes.Items {
		out = append(out, n.Name)
	}
	return out
}

func handlerFixture() []runtime.Object {
	return []runtime.Object{node("full", "1"), node("room", ""), node("zero", "0"),
		pod("f1", "full", 1), pod("new", "", 1), pod("plain", "", 0)}
}

func TestHandlerFilterAndPrioritize(t *testing.T) {
	ts := newTestServer(t, 0, handlerFixture()...)
	nodeObjs := []*v1.Node{node("full", "1"), node("room", ""), node("zero", "0")}
	for _, mode := range []struct {
		name string
		args func(p *v1.Pod) *Args
	}{
		{"NodeNames", func(p *v1.Pod) *Args { return namesArgs(p, "full", "room", "zero", "ghost") }},
		{"Nodes", func(p *v1.Pod) *Args { return nodesArgs(p, append(nodeObjs, node("ghost", ""))...) }},
	} {
		// Only full and zero: no node has room, so every one is explained.
		noRoom := namesArgs(pod("new", "", 1), "full", "zero")
		if mode.name == "Nodes" {
			noRoom = nodesArgs(pod("new", "", 1), node("full", "1"), node("zero", "0"))
		}
		t.Run(mode.name+"/filter", func(t *testing.T) {
			code, body := ts.post(t, "/filter", mustJSON(t, mode.args(pod("new", "", 1))))
			if code != http.StatusOK {
				t.Fatalf("code %d: %s", code, body)
			}
			var res extenderv1.ExtenderFilterResult
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatal(err)
			}
			want := []string{"room"}
			if mode.name == "Nodes" {
				// A full Node the informer does not know is judged by its own annotation.
				want = []string{"room", "ghost"}
				if res.NodeNames != nil || res.Nodes == nil {
					t.Fatalf("Nodes mode must answer with Nodes: %s", body)
				}
			} else if res.NodeNames == nil || res.Nodes != nil {
				t.Fatalf("NodeNames mode must answer with NodeNames: %s", body)
			}
			if got := wireNames(&res); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("kept %v, want %v", got, want)
			}
			if len(res.FailedNodes)+len(res.FailedAndUnresolvableNodes) != 0 {
				t.Errorf("a pod that fits somewhere got reasons: %s", body)
			}
			if res.Error != "" {
				t.Errorf("Error = %q", res.Error)
			}
		})
		t.Run(mode.name+"/filter no room", func(t *testing.T) {
			code, body := ts.post(t, "/filter", mustJSON(t, noRoom))
			if code != http.StatusOK {
				t.Fatalf("code %d: %s", code, body)
			}
			var res extenderv1.ExtenderFilterResult
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatal(err)
			}
			if got := wireNames(&res); len(got) != 0 {
				t.Errorf("kept %v, want none", got)
			}
			if (mode.name == "Nodes") != (res.NodeNames == nil) {
				t.Errorf("answered in the other mode: %s", body)
			}
			if got := res.FailedNodes["full"]; got != "underlay IPs exhausted: 1/1 used, pod needs 1" {
				t.Errorf("FailedNodes[full] = %q", got)
			}
			if _, ok := res.FailedAndUnresolvableNodes["zero"]; !ok {
				t.Errorf("zero not unresolvable: %s", body)
			}
		})
		t.Run(mode.name+"/prioritize", func(t *testing.T) {
			code, body := ts.post(t, "/prioritize", mustJSON(t, mode.args(pod("new", "", 1))))
			if code != http.StatusOK {
				t.Fatalf("code %d: %s", code, body)
			}
			var res extenderv1.HostPriorityList
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatal(err)
			}
			if len(res) != 4 || res[1].Host != "room" || res[1].Score != extenderv1.MaxExtenderPriority || res[0].Score != 0 {
				t.Errorf("priorities %+v", res)
			}
		})
		t.Run(mode.name+"/pod without need", func(t *testing.T) {
			code, body := ts.post(t, "/filter", mustJSON(t, mode.args(pod("plain", "", 0))))
			var res extenderv1.ExtenderFilterResult
			if err := json.Unmarshal(body, &res); err != nil || code != http.StatusOK {
				t.Fatalf("code %d, %v: %s", code, err, body)
			}
			if got := wireNames(&res); len(got) != 4 {
				t.Errorf("kept %v, want every node", got)
			}
		})
	}
	if got := testutil.ToFloat64(ts.m.FilteredNodes.WithLabelValues(extender.CauseExhausted)); got != 4 {
		// full, in each mode's two filter calls: counted whether or not
		// the answer carries the reason.
		t.Errorf("filtered_nodes_total{cause=exhausted} = %v, want 4", got)
	}
}

func TestHandlerBindAndCapacity(t *testing.T) {
	ts := newTestServer(t, 0, handlerFixture()...)
	code, body := ts.post(t, "/bind", mustJSON(t, bindArgs(pod("new", "", 1), "full")))
	var res extenderv1.ExtenderBindingResult
	if err := json.Unmarshal(body, &res); err != nil || code != http.StatusOK {
		t.Fatalf("code %d, %v: %s", code, err, body)
	}
	if !strings.Contains(res.Error, "underlay IPs exhausted: 1/1 used, pod needs 1") {
		t.Errorf("bind to a full node: Error = %q", res.Error)
	}
	code, body = ts.post(t, "/bind", mustJSON(t, bindArgs(pod("new", "", 1), "room")))
	res = extenderv1.ExtenderBindingResult{}
	if err := json.Unmarshal(body, &res); err != nil || code != http.StatusOK || res.Error != "" {
		t.Fatalf("bind: code %d, %v, %s", code, err, body)
	}
	ts.env.WaitSettled(t)
	code, body = ts.get(t, "/capacity")
	if code != http.StatusOK {
		t.Fatalf("capacity: %d %s", code, body)
	}
	var rep extender.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Totals != (extender.Totals{Nodes: 3, Capacity: 11, Used: 2, Free: 9}) {
		t.Errorf("totals %+v", rep.Totals)
	}
	if len(rep.Nodes) != 3 || rep.Nodes[1].Name != "room" || len(rep.Nodes[1].Pods) != 1 || rep.Nodes[1].Pods[0].Name != "new" {
		t.Errorf("nodes %s", body)
	}
	if got := testutil.ToFloat64(ts.m.BindConflicts.WithLabelValues("no_room")); got != 1 {
		t.Errorf("bind_conflicts_total{reason=no_room} = %v, want 1", got)
	}
}

func TestHandlerPreempt(t *testing.T) {
	ts := newTestServer(t, 0, handlerFixture()...)
	for _, args := range []*extenderv1.ExtenderPreemptionArgs{
		{Pod: pod("new", "", 1), NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{
			"full": {Pods: []*extenderv1.MetaPod{{UID: "uid-f1"}}}, "zero": {}}},
		{Pod: pod("new", "", 1), NodeNameToVictims: map[string]*extenderv1.Victims{
			"full": {Pods: []*v1.Pod{pod("f1", "full", 1)}}, "zero": {}}},
	} {
		code, body := ts.post(t, "/preempt", mustJSON(t, args))
		var res extenderv1.ExtenderPreemptionResult
		if err := json.Unmarshal(body, &res); err != nil || code != http.StatusOK {
			t.Fatalf("code %d, %v: %s", code, err, body)
		}
		if len(res.NodeNameToMetaVictims) != 1 || res.NodeNameToMetaVictims["full"] == nil {
			t.Errorf("preempt kept %s, want only full", body)
		}
	}
}

func TestHandlerBadInput(t *testing.T) {
	ts := newTestServer(t, 4096, handlerFixture()...)
	big := mustJSON(t, namesArgs(pod("new", "", 1), strings.Repeat("n", 5000)))
	tests := []struct {
		name, method, path string
		body               []byte
		chunked            bool
		wantCode           int
		wantMessage        string
	}{
		{name: "malformed filter", method: "POST", path: "/filter", body: []byte(`{"Pod":`), wantCode: 400, wantMessage: "decoding ExtenderArgs"},
		{name: "wrong type", method: "POST", path: "/filter", body: []byte(`{"Pod":[]}`), wantCode: 400, wantMessage: "decoding ExtenderArgs"},
		{name: "nil pod", method: "POST", path: "/filter", body: []byte(`{"NodeNames":["a"]}`), wantCode: 400, wantMessage: "Pod is missing"},
		{name: "nil nodes and names", method: "POST", path: "/prioritize", body: mustJSON(t, &extenderv1.ExtenderArgs{Pod: pod("p", "", 1)}), wantCode: 400, wantMessage: "NodeNames"},
		{name: "empty body", method: "POST", path: "/prioritize", body: nil, wantCode: 400, wantMessage: "decoding"},
		{name: "trailing garbage", method: "POST", path: "/filter", body: []byte(`{"Pod":{},"NodeNames":[]} x`), wantCode: 400, wantMessage: "decoding"},
		{name: "oversized", method: "POST", path: "/filter", body: big, wantCode: 413, wantMessage: "exceeds the limit"},
		{name: "oversized chunked", method: "POST", path: "/filter", body: big, chunked: true, wantCode: 413, wantMessage: "exceeds the limit"},
		{name: "bind without node", method: "POST", path: "/bind", body: []byte(`{"PodName":"p","PodNamespace":"ns"}`), wantCode: 400, wantMessage: "Node is missing"},
		{name: "bind without name", method: "POST", path: "/bind", body: []byte(`{"PodNamespace":"ns","Node":"a"}`), wantCode: 400, wantMessage: "PodName is missing"},
		{name: "bind without namespace", method: "POST", path: "/bind", body: []byte(`{"PodName":"p","Node":"a"}`), wantCode: 400, wantMessage: "PodNamespace is missing"},
		{name: "bind malformed", method: "POST", path: "/bind", body: []byte(`[1,2]`), wantCode: 400, wantMessage: "decoding ExtenderBindingArgs"},
		{name: "preempt nil pod", method: "POST", path: "/preempt", body: []byte(`{"NodeNameToMetaVictims":{}}`), wantCode: 400, wantMessage: "Pod is missing"},
		{name: "preempt malformed", method: "POST", path: "/preempt", body: []byte(`{"Pod":{},"NodeNameToVictims":{"a":{"Pods":[1]}}}`), wantCode: 400, wantMessage: "decoding ExtenderPreemptionArgs"},
		{name: "GET on a verb", method: "GET", path: "/filter", wantCode: 405, wantMessage: "not allowed"},
		{name: "unknown route", method: "POST", path: "/score", body: []byte(`{}`), wantCode: 404, wantMessage: "no route"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(tc.body)
			if tc.chunked {
				// Hide the length so that the limit must stop the read.
				body = io.MultiReader(bytes.NewReader(tc.body))
			}
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e httpserver.Error
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("error body is not JSON: %v", err)
			}
			if resp.StatusCode != tc.wantCode || e.Code != tc.wantCode || !strings.Contains(e.Message, tc.wantMessage) {
				t.Errorf("got %d %+v, want %d with a message containing %q", resp.StatusCode, e, tc.wantCode, tc.wantMessage)
			}
		})
	}
}

func TestHandlerProbesAndReadiness(t *testing.T) {
	ts := newTestServer(t, 0, handlerFixture()...)
	if code, _ := ts.get(t, "/healthz"); code != 200 {
		t.Errorf("healthz %d", code)
	}
	if code, _ := ts.get(t, "/readyz"); code != 200 {
		t.Errorf("readyz %d when synced", code)
	}
	ts.ready.Store(false)
	if code, _ := ts.get(t, "/readyz"); code != 503 {
		t.Errorf("readyz %d when not synced", code)
	}
	// A ledger that is not rebuilt must not answer: it could over-commit.
	if code, body := ts.post(t, "/filter", mustJSON(t, namesArgs(pod("new", "", 1), "room"))); code != 503 {
		t.Errorf("filter before sync: %d %s", code, body)
	}
	if code, _ := ts.post(t, "/bind", mustJSON(t, bindArgs(pod("new", "", 1), "room"))); code != 503 {
		t.Errorf("bind before sync: %d", code)
	}
	if code, _ := ts.get(t, "/capacity"); code != 503 {
		t.Errorf("capacity before sync: %d", code)
	}
	ts.ready.Store(true)
	ts.post(t, "/filter", mustJSON(t, namesArgs(pod("new", "", 1), "room")))
	code, body := ts.get(t, "/metrics")
	if code != 200 {
		t.Fatalf("metrics %d", code)
	}
	for _, want := range []string{
		`capscale_extender_http_requests_total{code="200",route="filter"} 1`,
		`capscale_extender_http_requests_total{code="503",route="filter"} 1`,
		`capscale_extender_http_request_duration_seconds_bucket`,
		`capscale_extender_capacity_ips`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestRecoverer(t *testing.T) {
	h := recoverer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/filter", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"reason":"InternalError"`) {
		t.Errorf("panic answered %d %s", rec.Code, rec.Body)
	}
}

// TestHandlerFilterReturnsNodesVerbatim checks that a surviving full Node
// goes back to kube-scheduler exactly as it came, status and images included.
func TestHandlerFilterReturnsNodesVerbatim(t *testing.T) {
	ts := newTestServer(t, 0, handlerFixture()...)
	in := realisticNode(7)
	in.Name = "room"
	sent, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	body := mustJSON(t, &extenderv1.ExtenderArgs{Pod: pod("new", "", 1), Nodes: &v1.NodeList{Items: []v1.Node{in, *node("full", "1")}}})
	code, resp := ts.post(t, "/filter", body)
	if code != http.StatusOK {
		t.Fatalf("code %d: %s", code, resp)
	}
	var res struct {
		Nodes struct {
			Items []json.RawMessage `json:"items"`
		}
	}
	if err := json.Unmarshal(resp, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Nodes.Items) != 1 || !bytes.Equal(res.Nodes.Items[0], sent) {
		t.Fatalf("returned nodes differ from the sent ones:\n%s", resp)
	}
	var typed extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(resp, &typed); err != nil || len(typed.Nodes.Items) != 1 || len(typed.Nodes.Items[0].Status.Images) != 50 {
		t.Fatalf("kube-scheduler could not decode the response: %v", err)
	}
}

// TestHandlerBindHammer is the scheduler's view of a burst: many concurrent
// filter+bind round trips over HTTP for more pods than there are IPs.
func TestHandlerBindHammer(t *testing.T) {
	objs := []runtime.Object{node("a", "4"), node("b", "2"), node("c", "")}
	const pods = 40
	for i := range pods {
		objs = append(objs, pod(fmt.Sprintf("h%02d", i), "", 1))
	}
	ts := newTestServer(t, 0, objs...)
	var (
		wg    sync.WaitGroup
		bound atomic.Int64
	)
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := pod(fmt.Sprintf("h%02d", i), "", 1)
			// As kube-scheduler does: a refused bind sends the pod back
			// to filter, until filter finds no room.
			for {
				code, body := ts.post(t, "/filter", mustJSON(t, namesArgs(p, "a", "b", "c")))
				var res extenderv1.ExtenderFilterResult
				if code != http.StatusOK || json.Unmarshal(body, &res) != nil {
					t.Errorf("filter: %d %s", code, body)
					return
				}
				if len(*res.NodeNames) == 0 {
					return
				}
				n := (*res.NodeNames)[i%len(*res.NodeNames)]
				code, body = ts.post(t, "/bind", mustJSON(t, bindArgs(p, n)))
				var br extenderv1.ExtenderBindingResult
				if code != http.StatusOK || json.Unmarshal(body, &br) != nil {
					t.Errorf("bind: %d %s", code, body)
					return
				}
				if br.Error == "" {
					bound.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	ts.env.WaitSettled(t)
	capacity := map[string]int64{"a": 4, "b": 2, "c": 10}
	for n, used := range ts.env.BoundPerNode(t) {
		if used > capacity[n] {
			t.Errorf("node %s over capacity: %d/%d", n, used, capacity[n])
		}
	}
	// A pod fails only when every node is full (IPs are never released
	// here), so exactly the capacity is handed out.
	if got := bound.Load(); got != 16 {
		t.Errorf("%d pods bound, want the capacity 16", got)
	}
}
