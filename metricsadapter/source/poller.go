package source

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/jsonpath"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/capscale/capscale/metricsadapter/config"
)

// Sample is one good value and the time it was fetched.
type Sample struct {
	Value float64
	Time  time.Time
}

// Reading is what a metric request gets from a source.
type Reading struct {
	Value float64
	// Time is the sample time, or the time of the read when Fallback is set.
	Time time.Time
	// Fallback is true when the configured fallback is served because there
	// is no fresh sample.
	Fallback bool
}

// UnavailableError means a source has no sample younger than its maxAge and
// no fallback: the metric must be an error so that the HPA holds, never 0.
type UnavailableError struct {
	Source string
	// Age of the last good sample; zero with Never.
	Age    time.Duration
	MaxAge time.Duration
	// Never is true when no poll has succeeded yet.
	Never bool
	// LastError is the reason of the last failed poll, if any.
	LastError string
}

// Error says how old the last sample is and why the last poll failed.
func (e *UnavailableError) Error() string {
	var b strings.Builder
	if e.Never {
		fmt.Fprintf(&b, "source %q has no good sample yet", e.Source)
	} else {
		fmt.Fprintf(&b, "source %q: last good sample is %s old, more than maxAge %s", e.Source, e.Age.Round(time.Second), e.MaxAge)
	}
	if e.LastError != "" {
		fmt.Fprintf(&b, "; last poll failed: %s", e.LastError)
	}
	return b.String()
}

// Poller polls one source and keeps its last good sample.
type Poller struct {
	cfg     config.Source
	client  *http.Client
	path    *jsonpath.JSONPath
	clock   clock.WithTicker
	metrics *Metrics

	// pollMu serialises polls: a JSONPath is not safe for concurrent use.
	// It also guards failStreak.
	pollMu sync.Mutex
	// failStreak counts failed polls since the last good one.
	failStreak int
	last       atomic.Pointer[Sample]
	lastErr    atomic.Pointer[PollError]

	cancel context.CancelFunc
	done   chan struct{}
}

// NewPoller builds a poller for cfg (which must be valid). It loads the CA
// file now so that a bad file is reported when the configuration is applied.
func NewPoller(cfg config.Source, clk clock.WithTicker, m *Metrics) (*Poller, error) {
	path, err := ParsePath(cfg.Name, cfg.JSONPath)
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", cfg.Name, err)
	}
	client, err := newHTTPClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", cfg.Name, err)
	}
	return &Poller{cfg: cfg, client: client, path: path, clock: clk, metrics: m}, nil
}

func newHTTPClient(cfg config.Source) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLS.CAFile != "" {
		pem, err := os.ReadFile(cfg.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading tls.caFile: %w", err)
		}
		// The CA file adds to the system roots rather than replacing them.
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.caFile %s holds no PEM certificate", cfg.TLS.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	tlsCfg.InsecureSkipVerify = cfg.TLS.InsecureSkipVerify //nolint:gosec // explicit opt-in, logged loudly.

	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, errors.New("http.DefaultTransport is not an *http.Transport")
	}
	tr := base.Clone()
	tr.TLSClientConfig = tlsCfg
	tr.MaxIdleConnsPerHost = 1
	tr.ResponseHeaderTimeout = cfg.Timeout.Duration
	return &http.Client{
		Transport: tr,
		// The request context carries the same deadline; this is a second
		// guard that also covers reading the body.
		Timeout: cfg.Timeout.Duration,
		// Headers such as X-Api-Key would follow a redirect to any host, so
		// redirects are not followed: a 3xx is a non-2xx answer.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// Name is the source name.
func (p *Poller) Name() string { return p.cfg.Name }

// Config is the source configuration the poller runs with.
func (p *Poller) Config() config.Source { return p.cfg }

// Last returns the last good sample, or false if there is none.
func (p *Poller) Last() (Sample, bool) {
	s := p.last.Load()
	if s == nil {
		return Sample{}, false
	}
	return *s, true
}

// Read returns the last good sample if it is within maxAge, else the
// fallback if configured, else an *UnavailableError.
func (p *Poller) Read() (Reading, error) {
	now := p.clock.Now()
	s := p.last.Load()
	if s != nil {
		if age := now.Sub(s.Time); age <= p.cfg.MaxAge.Duration {
			return Reading{Value: s.Value, Time: s.Time}, nil
		}
	}
	if p.cfg.Fallback != nil {
		return Reading{Value: *p.cfg.Fallback, Time: now, Fallback: true}, nil
	}
	e := &UnavailableError{Source: p.cfg.Name, MaxAge: p.cfg.MaxAge.Duration, Never: s == nil}
	if s != nil {
		e.Age = now.Sub(s.Time)
	}
	if le := p.lastErr.Load(); le != nil {
		e.LastError = string(le.Reason)
	}
	return Reading{}, e
}

// start runs the poll loop in the background until stop.
func (p *Poller) start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		p.run(ctx)
	}()
}

// stop ends the poll loop and waits for it.
func (p *Poller) stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	<-p.done
	if tr, ok := p.client.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

func (p *Poller) run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("source", p.cfg.Name)
	ctx = klog.NewContext(ctx, logger)
	if p.cfg.TLS.InsecureSkipVerify {
		logger.Error(nil, "TLS verification is DISABLED for this source (tls.insecureSkipVerify); anyone on the path can forge its load index", "url", p.redactedURL())
	}
	t := p.clock.NewTicker(p.cfg.Interval.Duration)
	defer t.Stop()
	for {
		_ = p.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// Poll fetches the source once. On success the sample is replaced; on
// failure the last good sample stays, the reason is logged and counted, and
// the *PollError is returned. A poll cut short by ctx being cancelled (a
// stop, not a source failure) is neither logged nor counted.
func (p *Poller) Poll(ctx context.Context) error {
	p.pollMu.Lock()
	defer p.pollMu.Unlock()
	logger := klog.FromContext(ctx)

	start := p.clock.Now()
	v, err := p.fetch(ctx)
	p.metrics.pollDuration.WithLabelValues(p.cfg.Name).Observe(p.clock.Since(start).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		var pe *PollError
		if !errors.As(err, &pe) {
			pe = &PollError{Reason: ReasonConnection, Err: err}
		}
		prev := p.lastErr.Swap(pe)
		p.failStreak++
		p.metrics.errors.WithLabelValues(p.cfg.Name, string(pe.Reason)).Inc()
		kv := []any{"reason", pe.Reason, "url", p.redactedURL(), "failedPolls", p.failStreak}
		if s, ok := p.Last(); ok {
			kv = append(kv, "lastGoodValue", s.Value, "lastGoodAge", p.clock.Since(s.Time).Round(time.Millisecond).String())
		}
		// The first failure and every change of reason are errors; the same
		// failure repeated every interval is only logged at -v=2 (it is
		// still counted).
		if prev == nil || prev.Reason != pe.Reason {
			logger.Error(pe.Err, "Polling load-index source failed, keeping the last good value", kv...)
		} else {
			logger.V(2).Info("Polling load-index source still fails", append(kv, "err", pe.Err.Error())...)
		}
		return pe
	}
	now := p.clock.Now()
	p.last.Store(&Sample{Value: v, Time: now})
	if p.lastErr.Swap(nil) != nil {
		logger.Info("Load-index source recovered", "failedPolls", p.failStreak, "value", v)
	}
	p.failStreak = 0
	logger.V(4).Info("Polled load-index source", "value", v)
	return nil
}

func (p *Poller) fetch(ctx context.Context) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout.Duration)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.URL, nil)
	if err != nil {
		return 0, pollErr(ReasonConnection, "building request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "capscale-metrics-adapter")
	for k, v := range p.cfg.Headers {
		req.Header.Set(k, v)
	}
	if p.cfg.BearerTokenFile != "" {
		// Read on every poll so that a rotated token is picked up.
		tok, err := os.ReadFile(p.cfg.BearerTokenFile)
		if err != nil {
			return 0, pollErr(ReasonCredentials, "reading bearerTokenFile: %w", err)
		}
		t := strings.TrimSpace(string(tok))
		if t == "" {
			return 0, pollErr(ReasonCredentials, "bearerTokenFile %s is empty", p.cfg.BearerTokenFile)
		}
		req.Header.Set("Authorization", "Bearer "+t)
	}

	resp, err := p.client.Do(req)
	if err != nil {
		return 0, &PollError{Reason: classify(err), Err: stripURL(err)}
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 0, pollErr(ReasonHTTPStatus, "HTTP status %d", resp.StatusCode)
	}
	if resp.ContentLength > MaxBodyBytes {
		return 0, pollErr(ReasonBodyTooLarge, "Content-Length %d is more than %d bytes", resp.ContentLength, MaxBodyBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err == nil && ctx.Err() != nil {
		// net/http may hand over an answer that raced the deadline; past
		// it, nothing counts.
		err = ctx.Err()
	}
	if err != nil {
		return 0, &PollError{Reason: classify(err), Err: fmt.Errorf("reading body: %w", stripURL(err))}
	}
	return DecodeValue(body, p.path)
}

// classify maps a transport error to a Reason.
func classify(err error) Reason {
	var (
		netErr       net.Error
		unknownCA    x509.UnknownAuthorityError
		hostErr      x509.HostnameError
		invalidCert  x509.CertificateInvalidError
		verifyErr    *tls.CertificateVerificationError
		recordHdrErr tls.RecordHeaderError
		alertErr     tls.AlertError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return ReasonTimeout
	case errors.As(err, &verifyErr), errors.As(err, &unknownCA), errors.As(err, &hostErr),
		errors.As(err, &invalidCert), errors.As(err, &recordHdrErr), errors.As(err, &alertErr):
		return ReasonTLS
	default:
		return ReasonConnection
	}
}

// stripURL drops the *url.Error wrapper, whose message repeats the URL
// (which may carry a token in its query); the URL is logged redacted.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redactedURL is the source URL without its query, which may carry a key.
func (p *Poller) redactedURL() string {
	u, err := url.Parse(p.cfg.URL)
	if err != nil {
		return "<unparseable>"
	}
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	return u.Redacted()
}
