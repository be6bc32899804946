package source

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/capscale/capscale/metricsadapter/config"
)

// ErrUnknownSource is returned by Manager.Read for a name that is not
// configured.
var ErrUnknownSource = errors.New("unknown source")

// Metrics are the per-source poll metrics.
type Metrics struct {
	errors       *prometheus.CounterVec
	pollDuration *prometheus.HistogramVec
}

// NewMetrics creates the poll metrics. The per-source gauges (sample age,
// last success, value) are collected from the Manager, which must be
// registered too.
func NewMetrics() *Metrics {
	return &Metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capscale_adapter_source_errors_total",
			Help: "Failed polls of a load-index source, by reason. The last good value is kept until maxAge.",
		}, []string{"source", "reason"}),
		pollDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "capscale_adapter_source_poll_duration_seconds",
			Help:    "Duration of polls of a load-index source, successful or not.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"source"}),
	}
}

var (
	descLastSuccess = prometheus.NewDesc("capscale_adapter_source_last_success_timestamp_seconds",
		"Unix time of the last good sample of a load-index source.", []string{"source"}, nil)
	descSampleAge = prometheus.NewDesc("capscale_adapter_source_sample_age_seconds",
		"Age of the last good sample of a load-index source.", []string{"source"}, nil)
	descValue = prometheus.NewDesc("capscale_adapter_source_value",
		"Last good value of a load-index source.", []string{"source"}, nil)
	descStale = prometheus.NewDesc("capscale_adapter_source_stale",
		"1 when a load-index source has no sample within maxAge (its metric is an error, or the fallback), else 0.", []string{"source"}, nil)
)

// Manager owns one Poller per configured source and answers reads from
// their last samples.
type Manager struct {
	ctx     context.Context
	clock   clock.WithTicker
	metrics *Metrics

	// applyMu serialises Apply; readers use the pollers snapshot lock-free.
	applyMu sync.Mutex
	pollers atomic.Pointer[map[string]*Poller]
}

// NewManager returns a Manager whose pollers run until ctx is done (or Stop).
func NewManager(ctx context.Context, clk clock.WithTicker, m *Metrics) *Manager {
	mgr := &Manager{ctx: ctx, clock: clk, metrics: m}
	empty := map[string]*Poller{}
	mgr.pollers.Store(&empty)
	return mgr
}

// Register adds the poll metrics and the Manager's gauges to reg.
func (m *Manager) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.metrics.errors, m.metrics.pollDuration, m} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering source metrics: %w", err)
		}
	}
	return nil
}

// Apply makes the running pollers match sources: unchanged sources keep
// running, new ones start, removed ones stop, changed ones restart. It is
// all or nothing: if any poller cannot be built (e.g. an unreadable CA
// file), nothing changes and the error is returned.
func (m *Manager) Apply(sources []config.Source) error {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	logger := klog.FromContext(m.ctx)
	old := *m.pollers.Load()

	next := make(map[string]*Poller, len(sources))
	var started []*Poller
	for _, s := range sources {
		if p, ok := old[s.Name]; ok && reflect.DeepEqual(p.cfg, s) {
			next[s.Name] = p
			continue
		}
		p, err := NewPoller(s, m.clock, m.metrics)
		if err != nil {
			return err
		}
		next[s.Name] = p
		started = append(started, p)
	}

	// Stop replaced pollers before reading their last sample, so that an
	// in-flight poll cannot update it afterwards.
	for name, p := range old {
		if next[name] == p {
			continue
		}
		p.stop()
		if _, still := next[name]; !still {
			m.metrics.errors.DeletePartialMatch(prometheus.Labels{"source": name})
			m.metrics.pollDuration.DeleteLabelValues(name)
			logger.Info("Stopped load-index source", "source", name)
		}
	}
	for _, p := range started {
		// Same endpoint and path: the last good sample is still that
		// source's value, so keep serving it (maxAge still applies).
		if prev, ok := old[p.cfg.Name]; ok && prev.cfg.URL == p.cfg.URL && prev.cfg.JSONPath == p.cfg.JSONPath {
			if last := prev.last.Load(); last != nil {
				p.last.Store(last)
			}
		}
	}
	m.pollers.Store(&next)
	for _, p := range started {
		for _, r := range Reasons {
			m.metrics.errors.WithLabelValues(p.cfg.Name, string(r))
		}
		p.start(m.ctx)
		logger.Info("Started load-index source", "source", p.cfg.Name, "interval", p.cfg.Interval.Duration, "maxAge", p.cfg.MaxAge.Duration)
	}
	return nil
}

// Stop stops every poller.
func (m *Manager) Stop() {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	for _, p := range *m.pollers.Load() {
		p.stop()
	}
	empty := map[string]*Poller{}
	m.pollers.Store(&empty)
}

// Read returns the named source's reading (see Poller.Read). An unknown name
// returns an error wrapping ErrUnknownSource.
func (m *Manager) Read(name string) (Reading, error) {
	p, ok := (*m.pollers.Load())[name]
	if !ok {
		return Reading{}, fmt.Errorf("%w %q", ErrUnknownSource, name)
	}
	return p.Read()
}

// Poller returns the named poller, for tests and diagnostics.
func (m *Manager) Poller(name string) (*Poller, bool) {
	p, ok := (*m.pollers.Load())[name]
	return p, ok
}

// Names returns the configured source names, sorted.
func (m *Manager) Names() []string {
	ps := *m.pollers.Load()
	out := make([]string, 0, len(ps))
	for n := range ps {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Describe implements prometheus.Collector.
func (m *Manager) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLastSuccess
	ch <- descSampleAge
	ch <- descValue
	ch <- descStale
}

// Collect implements prometheus.Collector: the gauges are computed at
// scrape time from the pollers, so removed sources disappear with them.
func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	now := m.clock.Now()
	for name, p := range *m.pollers.Load() {
		stale := 1.0
		if s, ok := p.Last(); ok {
			age := now.Sub(s.Time)
			ch <- prometheus.MustNewConstMetric(descLastSuccess, prometheus.GaugeValue, float64(s.Time.UnixNano())/1e9, name)
			ch <- prometheus.MustNewConstMetric(descSampleAge, prometheus.GaugeValue, age.Seconds(), name)
			ch <- prometheus.MustNewConstMetric(descValue, prometheus.GaugeValue, s.Value, name)
			if age <= p.cfg.MaxAge.Duration {
				stale = 0
			}
		}
		ch <- prometheus.MustNewConstMetric(descStale, prometheus.GaugeValue, stale, name)
	}
}
