package httpserver

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestServeShutsDownWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	go func() { done <- Serve(ctx, Options{Addr: "127.0.0.1:0"}, h, func(a net.Addr) { addrc <- a }) }()
	addr := <-addrc
	resp, err := http.Get("http://" + addr.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the context ended")
	}
	if _, err := net.Dial("tcp", addr.String()); err == nil {
		t.Error("still listening after shutdown")
	}
}

func TestServeReportsListenErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = Serve(context.Background(), Options{Addr: ln.Addr().String()}, http.NotFoundHandler(), nil)
	if err == nil || !strings.Contains(err.Error(), "listening on") {
		t.Fatalf("Serve on a taken port = %v, want a listen error", err)
	}
}

func TestInstrumenterCountsByRouteAndCode(t *testing.T) {
	reg := prometheus.NewRegistry()
	in := NewInstrumenter("test", reg)
	ok := in.Wrap("ok", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("x")) }))
	bad := in.Wrap("bad", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { WriteError(w, http.StatusBadRequest, "no") }))
	for _, h := range []http.Handler{ok, ok, bad} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/anything/at/all", nil))
	}
	want := `
# HELP capscale_test_http_requests_total HTTP requests served, by route and status code.
# TYPE capscale_test_http_requests_total counter
capscale_test_http_requests_total{code="200",route="ok"} 2
capscale_test_http_requests_total{code="400",route="bad"} 1
`
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want), "capscale_test_http_requests_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "capscale_test_http_request_duration_seconds"); n != 2 {
		t.Errorf("%d latency series, want 2 (one per route and code)", n)
	}
}

func TestStatusRecorderKeepsTheFirstCode(t *testing.T) {
	rec := NewStatusRecorder(httptest.NewRecorder())
	if rec.Code() != http.StatusOK {
		t.Errorf("default code %d, want 200", rec.Code())
	}
	rec.WriteHeader(http.StatusConflict)
	rec.WriteHeader(http.StatusInternalServerError)
	if rec.Code() != http.StatusConflict {
		t.Errorf("code %d, want the first one written (409)", rec.Code())
	}
}

func TestWriteError(t *testing.T) {
	tests := []struct {
		code   int
		reason string
	}{
		{400, "BadRequest"}, {401, "Unauthorized"}, {403, "Forbidden"}, {404, "NotFound"},
		{409, "Conflict"}, {413, "RequestEntityTooLarge"}, {422, "Invalid"}, {503, "ServiceUnavailable"},
		{500, "InternalError"}, {502, "InternalError"},
	}
	for _, tc := range tests {
		rec := httptest.NewRecorder()
		WriteError(rec, tc.code, "why")
		var e Error
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if rec.Code != tc.code || e != (Error{Code: tc.code, Reason: tc.reason, Message: "why"}) || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("WriteError(%d) = %d %+v %q", tc.code, rec.Code, e, rec.Header().Get("Content-Type"))
		}
	}
}

// TestConnCounter: a keep-alive client's calls share one connection; a
// client that closes after each call opens one per call.
func TestConnCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	go func() {
		done <- Serve(ctx, Options{Addr: "127.0.0.1:0", ConnState: ConnCounter("test", reg)}, h, func(a net.Addr) { addrc <- a })
	}()
	url := "http://" + (<-addrc).String()
	get := func(c *http.Client) {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	keepAlive := &http.Client{Transport: &http.Transport{}}
	closing := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 3 {
		get(keepAlive)
	}
	if got := connections(t, reg); got != 1 {
		t.Errorf("3 keep-alive calls: connections = %v, want 1", got)
	}
	for range 3 {
		get(closing)
	}
	if got := connections(t, reg); got != 4 {
		t.Errorf("then 3 closing calls: connections = %v, want 4", got)
	}
	cancel()
	<-done
}

// connections reads capscale_test_http_connections_total from reg.
func connections(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "capscale_test_http_connections_total" {
		t.Fatalf("gathered %v, %v; want capscale_test_http_connections_total", mfs, err)
	}
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}
