package source

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capscale/capscale/metricsadapter/config"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func testSource(name, url string) config.Source {
	return config.Source{
		Name:     name,
		URL:      url,
		JSONPath: "{.data.load_balance}",
		Interval: metav1.Duration{Duration: 30 * time.Second},
		// Generous: a loaded CI machine must not turn a good poll into a
		// timeout. Tests about timeouts shorten it.
		Timeout: metav1.Duration{Duration: 30 * time.Second},
		MaxAge:  metav1.Duration{Duration: 2 * time.Minute},
	}
}

func newTestPoller(t *testing.T, cfg config.Source) (*Poller, *clocktesting.FakeClock, *Metrics) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	m := NewMetrics()
	p, err := NewPoller(cfg, clk, m)
	if err != nil {
		t.Fatalf("NewPoller: %v", err)
	}
	t.Cleanup(func() {
		if tr, ok := p.client.Transport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
	})
	return p, clk, m
}

// loadServer answers with body, or the status if non-zero.
func loadServer(t *testing.T, status int, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if status != 0 {
			w.WriteHeader(status)
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestPollBadData checks every kind of bad answer: each keeps the last good
// value and is counted under its reason.
func TestPollBadData(t *testing.T) {
	const good = `{"data":{"load_balance":0.83}}`
	const shortTimeout = 300 * time.Millisecond

	refusedURL := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		return "http://" + addr + "/load"
	}
	handlerURL := func(h http.HandlerFunc) func(t *testing.T) string {
		return func(t *testing.T) string {
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			return srv.URL
		}
	}
	bodyURL := func(status int, body string) func(t *testing.T) string {
		return func(t *testing.T) string { return loadServer(t, status, body).URL }
	}

	tests := []struct {
		name       string
		url        func(t *testing.T) string
		short      bool // poll with a short timeout; the server outlasts it
		wantReason Reason
	}{
		{name: "refused connection", url: refusedURL, wantReason: ReasonConnection},
		{
			name: "no answer within timeout",
			url: handlerURL(func(_ http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
			}),
			short:      true,
			wantReason: ReasonTimeout,
		},
		{
			name: "slow trickle of the body",
			url: handlerURL(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte(`{"data":{"load_balance":`))
				for i := 0; i < 200; i++ {
					select {
					case <-r.Context().Done():
						return
					case <-time.After(20 * time.Millisecond):
					}
					_, _ = w.Write([]byte(" "))
					w.(http.Flusher).Flush()
				}
				_, _ = w.Write([]byte(`0.9}}`))
			}),
			short:      true,
			wantReason: ReasonTimeout,
		},
		{name: "500", url: bodyURL(http.StatusInternalServerError, good), wantReason: ReasonHTTPStatus},
		{name: "404", url: bodyURL(http.StatusNotFound, ""), wantReason: ReasonHTTPStatus},
		{
			name: "redirect is not followed",
			url: handlerURL(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusFound)
			}),
			wantReason: ReasonHTTPStatus,
		},
		{name: "not JSON", url: bodyURL(0, "<html>busy</html>"), wantReason: ReasonInvalidJSON},
		{name: "missing path", url: bodyURL(0, `{"data":{}}`), wantReason: ReasonMissingPath},
		{name: "not a number", url: bodyURL(0, `{"data":{"load_balance":"high"}}`), wantReason: ReasonNotANumber},
		{name: "negative", url: bodyURL(0, `{"data":{"load_balance":-0.5}}`), wantReason: ReasonInvalidValue},
		{name: "infinite", url: bodyURL(0, `{"data":{"load_balance":1e999}}`), wantReason: ReasonInvalidValue},
		{
			name:       "body over 1 MiB with Content-Length",
			url:        bodyURL(0, `{"data":{"load_balance":0.5},"pad":"`+strings.Repeat("x", MaxBodyBytes)+`"}`),
			wantReason: ReasonBodyTooLarge,
		},
		{
			name: "body over 1 MiB streamed",
			url: handlerURL(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(`{"data":{"load_balance":0.5},"pad":"`))
				chunk := []byte(strings.Repeat("x", 64<<10))
				for i := 0; i < 20; i++ {
					_, _ = w.Write(chunk)
					w.(http.Flusher).Flush()
				}
				_, _ = w.Write([]byte(`"}`))
			}),
			wantReason: ReasonBodyTooLarge,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// First a good poll, then the bad one against another URL.
			goodSrv := loadServer(t, 0, good)
			p, clk, m := newTestPoller(t, testSource("gpu-load", goodSrv.URL))
			ctx := context.Background()
			if err := p.Poll(ctx); err != nil {
				t.Fatalf("good poll: %v", err)
			}
			goodTime := clk.Now()

			clk.Step(10 * time.Second)
			p.cfg.URL = tc.url(t)
			if tc.short {
				// The per-poll context deadline comes from cfg.Timeout.
				p.cfg.Timeout.Duration = shortTimeout
			}
			err := p.Poll(ctx)
			var pe *PollError
			if !errors.As(err, &pe) || pe.Reason != tc.wantReason {
				t.Fatalf("Poll() = %v, want reason %s", err, tc.wantReason)
			}
			if got := testutil.ToFloat64(m.errors.WithLabelValues("gpu-load", string(tc.wantReason))); got != 1 {
				t.Errorf("errors_total{reason=%s} = %v, want 1", tc.wantReason, got)
			}
			r, err := p.Read()
			if err != nil {
				t.Fatalf("Read after a bad poll: %v", err)
			}
			if r.Value != 0.83 || !r.Time.Equal(goodTime) || r.Fallback {
				t.Errorf("Read() = %+v, want the last good value 0.83 sampled at %v", r, goodTime)
			}
		})
	}
}

func writeCA(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPollTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"data":{"load_balance":0.4}}`))
	}))
	t.Cleanup(srv.Close)
	ca := writeCA(t, srv)

	tests := []struct {
		name       string
		tls        config.TLS
		wantReason Reason // empty: success
	}{
		{name: "verified by default: unknown CA is rejected", wantReason: ReasonTLS},
		{name: "caFile makes it trusted", tls: config.TLS{CAFile: ca}},
		{name: "insecureSkipVerify accepts it", tls: config.TLS{InsecureSkipVerify: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testSource("tls", srv.URL)
			cfg.TLS = tc.tls
			p, _, _ := newTestPoller(t, cfg)
			err := p.Poll(context.Background())
			if tc.wantReason == "" {
				if err != nil {
					t.Fatalf("Poll: %v", err)
				}
				if s, _ := p.Last(); s.Value != 0.4 {
					t.Errorf("value = %v, want 0.4", s.Value)
				}
				return
			}
			var pe *PollError
			if !errors.As(err, &pe) || pe.Reason != tc.wantReason {
				t.Fatalf("Poll() = %v, want reason %s", err, tc.wantReason)
			}
		})
	}
}

func TestNewPollerBadCAFile(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing.pem"), notPEM} {
		cfg := testSource("x", "https://127.0.0.1:1/")
		cfg.TLS.CAFile = path
		if _, err := NewPoller(cfg, clocktesting.NewFakeClock(t0), NewMetrics()); err == nil {
			t.Errorf("caFile %s: want an error", path)
		}
	}
}

func TestPollHeadersAndBearerToken(t *testing.T) {
	type seen struct{ apiKey, auth string }
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("X-Api-Key"), r.Header.Get("Authorization")}
		_, _ = w.Write([]byte(`{"data":{"load_balance":1}}`))
	}))
	t.Cleanup(srv.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := testSource("auth", srv.URL)
	cfg.Headers = map[string]string{"X-Api-Key": "k"}
	cfg.BearerTokenFile = tokenFile
	p, _, m := newTestPoller(t, cfg)
	if err := p.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != (seen{"k", "Bearer tok-1"}) {
		t.Errorf("server saw %+v", s)
	}

	// A rotated token is read on the next poll.
	if err := os.WriteFile(tokenFile, []byte("tok-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s.auth != "Bearer tok-2" {
		t.Errorf("after rotation server saw %q", s.auth)
	}

	// A missing token file is a credentials error, not a request without auth.
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	var pe *PollError
	if err := p.Poll(context.Background()); !errors.As(err, &pe) || pe.Reason != ReasonCredentials {
		t.Fatalf("Poll() = %v, want reason credentials", err)
	}
	if n := testutil.ToFloat64(m.errors.WithLabelValues("auth", string(ReasonCredentials))); n != 1 {
		t.Errorf("credentials errors = %v", n)
	}
	if len(got) != 0 {
		t.Error("request sent without its token")
	}
}

func TestReadFreshness(t *testing.T) {
	fallback := 0.6
	tests := []struct {
		name        string
		fallback    *float64
		poll        bool          // one good poll at t0
		advance     time.Duration // then the clock moves on
		want        Reading       // Time zero: expect the read time
		wantErr     string
		wantUseRead bool
	}{
		{name: "fresh sample", poll: true, advance: time.Minute, want: Reading{Value: 0.83, Time: t0}},
		{name: "exactly maxAge is still fresh", poll: true, advance: 2 * time.Minute, want: Reading{Value: 0.83, Time: t0}},
		{name: "past maxAge is an error", poll: true, advance: 2*time.Minute + time.Second, wantErr: "last good sample is 2m1s old, more than maxAge 2m0s"},
		{name: "past maxAge with fallback", fallback: &fallback, poll: true, advance: 3 * time.Minute, want: Reading{Value: 0.6, Fallback: true}, wantUseRead: true},
		{name: "never polled is an error", wantErr: "has no good sample yet"},
		{name: "never polled with fallback", fallback: &fallback, want: Reading{Value: 0.6, Fallback: true}, wantUseRead: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := loadServer(t, 0, `{"data":{"load_balance":0.83}}`)
			cfg := testSource("gpu-load", srv.URL)
			cfg.Fallback = tc.fallback
			p, clk, _ := newTestPoller(t, cfg)
			if tc.poll {
				if err := p.Poll(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			clk.Step(tc.advance)
			got, err := p.Read()
			if tc.wantErr != "" {
				var ue *UnavailableError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Read() = %+v, %v; want UnavailableError %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			want := tc.want
			if tc.wantUseRead {
				want.Time = clk.Now()
			}
			if got != want {
				t.Errorf("Read() = %+v, want %+v", got, want)
			}
		})
	}
}

func TestUnavailableErrorNamesLastFailure(t *testing.T) {
	p, clk, _ := newTestPoller(t, testSource("down", "http://127.0.0.1:1/"))
	_ = p.Poll(context.Background())
	clk.Step(time.Hour)
	_, err := p.Read()
	if err == nil || !strings.Contains(err.Error(), "last poll failed: connection") {
		t.Errorf("Read() error = %v, want the last failure reason", err)
	}
}

func TestManagerApply(t *testing.T) {
	hits := map[string]chan struct{}{"a": make(chan struct{}, 100), "b": make(chan struct{}, 100), "c": make(chan struct{}, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		hits[name] <- struct{}{}
		_, _ = fmt.Fprintf(w, `{"data":{"load_balance":%d}}`, len(name))
	}))
	t.Cleanup(srv.Close)

	clk := clocktesting.NewFakeClock(t0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr := NewManager(ctx, clk, NewMetrics())
	t.Cleanup(mgr.Stop)
	reg := prometheus.NewPedanticRegistry()
	if err := mgr.Register(reg); err != nil {
		t.Fatal(err)
	}

	waitHit := func(name string) {
		t.Helper()
		select {
		case <-hits[name]:
		case <-time.After(time.Minute):
			t.Fatalf("source %s was not polled", name)
		}
	}
	src := func(name string) config.Source { return testSource(name, srv.URL+"/"+name) }

	if err := mgr.Apply([]config.Source{src("a"), src("b")}); err != nil {
		t.Fatal(err)
	}
	waitHit("a")
	waitHit("b")
	if got := strings.Join(mgr.Names(), ","); got != "a,b" {
		t.Errorf("names = %s", got)
	}
	pa, _ := mgr.Poller("a")

	// b removed, c added, a unchanged (same poller keeps running).
	if err := mgr.Apply([]config.Source{src("a"), src("c")}); err != nil {
		t.Fatal(err)
	}
	waitHit("c")
	if pa2, _ := mgr.Poller("a"); pa2 != pa {
		t.Error("unchanged source a was restarted")
	}
	if _, err := mgr.Read("b"); !errors.Is(err, ErrUnknownSource) {
		t.Errorf("Read(b) after removal: %v, want ErrUnknownSource", err)
	}

	// A bad CA file rejects the whole change.
	bad := src("d")
	bad.URL = "https://127.0.0.1:1/d"
	bad.TLS.CAFile = filepath.Join(t.TempDir(), "missing.pem")
	if err := mgr.Apply([]config.Source{src("a"), bad}); err == nil {
		t.Fatal("Apply with a bad CA file succeeded")
	}
	if got := strings.Join(mgr.Names(), ","); got != "a,c" {
		t.Errorf("after failed Apply names = %s, want a,c", got)
	}

	// Changing a's timeout restarts it but keeps its last sample.
	waitForSample(t, mgr, "a")
	// a's sample before the restart: the new poller starts with it.
	carried := pa.last.Load()
	a := src("a")
	a.Timeout.Duration = time.Second
	if err := mgr.Apply([]config.Source{a, src("c")}); err != nil {
		t.Fatal(err)
	}
	pa2, _ := mgr.Poller("a")
	if pa2 == pa {
		t.Error("changed source a was not restarted")
	}
	if r, err := mgr.Read("a"); err != nil || r.Value != 1 {
		t.Errorf("Read(a) after restart = %+v, %v; want the carried-over 1", r, err)
	}
	// Let the restarted poller's first poll land before the clock moves.
	deadline := time.Now().Add(time.Minute)
	for pa2.last.Load() == carried {
		if time.Now().After(deadline) {
			t.Fatal("restarted source a never polled")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The gauges follow the sources: b is gone, a and c are there.
	waitForSample(t, mgr, "c")
	// Less than the 30s interval, so no poll refreshes the samples.
	clk.Step(20 * time.Second)
	want := `
# HELP capscale_adapter_source_sample_age_seconds Age of the last good sample of a load-index source.
# TYPE capscale_adapter_source_sample_age_seconds gauge
capscale_adapter_source_sample_age_seconds{source="a"} 20
capscale_adapter_source_sample_age_seconds{source="c"} 20
# HELP capscale_adapter_source_stale 1 when a load-index source has no sample within maxAge (its metric is an error, or the fallback), else 0.
# TYPE capscale_adapter_source_stale gauge
capscale_adapter_source_stale{source="a"} 0
capscale_adapter_source_stale{source="c"} 0
# HELP capscale_adapter_source_value Last good value of a load-index source.
# TYPE capscale_adapter_source_value gauge
capscale_adapter_source_value{source="a"} 1
capscale_adapter_source_value{source="c"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"capscale_adapter_source_sample_age_seconds", "capscale_adapter_source_stale", "capscale_adapter_source_value"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(mgr.metrics.errors); n != 2*len(Reasons) {
		t.Errorf("error series = %d, want %d (b's removed)", n, 2*len(Reasons))
	}
}

func waitForSample(t *testing.T, mgr *Manager, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if p, ok := mgr.Poller(name); ok {
			if _, ok := p.Last(); ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample for %s", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPollLogsOncePerStreak: a source that stays down is logged as an error
// once (and again when the reason changes), not every interval; recovery is
// logged. Every failure is still counted.
func TestPollLogsOncePerStreak(t *testing.T) {
	var mode atomic.Value
	mode.Store("down")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		switch mode.Load() {
		case "down":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "garbage":
			_, _ = w.Write([]byte(`<html>`))
		default:
			_, _ = w.Write([]byte(`{"data":{"load_balance":0.5}}`))
		}
	}))
	t.Cleanup(srv.Close)
	p, _, m := newTestPoller(t, testSource("flaky", srv.URL))

	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 0})
	ctx := klog.NewContext(context.Background(), logger)

	for i := 0; i < 3; i++ {
		_ = p.Poll(ctx)
	}
	mode.Store("garbage")
	_ = p.Poll(ctx)
	mode.Store("ok")
	if err := p.Poll(ctx); err != nil {
		t.Fatal(err)
	}

	var errs, recovered int
	for _, l := range lines {
		switch {
		case strings.Contains(l, "Polling load-index source failed"):
			errs++
		case strings.Contains(l, "Load-index source recovered") && strings.Contains(l, `"failedPolls"=4`):
			recovered++
		}
	}
	if errs != 2 || recovered != 1 {
		t.Errorf("logged %d failures and %d recoveries, want 2 and 1:\n%s", errs, recovered, strings.Join(lines, "\n"))
	}
	if n := testutil.ToFloat64(m.errors.WithLabelValues("flaky", string(ReasonHTTPStatus))); n != 3 {
		t.Errorf("http_status errors = %v, want 3", n)
	}
}

// lateAnswer hands over an empty 200 only after the poll's deadline, as
// net/http can when the answer races the cancel.
type lateAnswer struct{}

func (lateAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// TestPollAnswerAfterDeadline: an answer past the timeout is a timeout, not
// invalid JSON.
func TestPollAnswerAfterDeadline(t *testing.T) {
	p, _, m := newTestPoller(t, testSource("gpu-load", "http://127.0.0.1:1/load"))
	p.client = &http.Client{Transport: lateAnswer{}}
	p.cfg.Timeout.Duration = 50 * time.Millisecond
	err := p.Poll(context.Background())
	var pe *PollError
	if !errors.As(err, &pe) || pe.Reason != ReasonTimeout {
		t.Fatalf("Poll() = %v, want reason %s", err, ReasonTimeout)
	}
	if got := testutil.ToFloat64(m.errors.WithLabelValues("gpu-load", string(ReasonTimeout))); got != 1 {
		t.Errorf("errors_total{reason=%s} = %v, want 1", ReasonTimeout, got)
	}
}
