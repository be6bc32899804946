package config

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// readFile reads at most MaxFileSize+1 bytes, so that Decode can tell the
// file is too big without reading all of it.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading config file %s: %w", path, err)
	}
	return data, nil
}

// Metrics are the config reload metrics.
type Metrics struct {
	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
}

// NewMetrics creates the reload metrics; register them with Register.
func NewMetrics() *Metrics {
	return &Metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capscale_adapter_config_reloads_total",
			Help: "Configuration file reloads after a change, by result (success or failure). A failure keeps the previous configuration.",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "capscale_adapter_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful configuration load.",
		}),
	}
}

// Register adds the metrics to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.reloads, m.lastSuccess} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering config metrics: %w", err)
		}
	}
	return nil
}

// Watcher polls a configuration file and calls OnChange with each new valid
// configuration. Polling the content, not inotify, follows the symlink swap
// a ConfigMap volume does on update and needs nothing from the platform.
type Watcher struct {
	path     string
	interval time.Duration
	clock    clock.WithTicker
	metrics  *Metrics
	apply    func(*Config) error

	mu sync.Mutex
	// lastHash is the content last decoded, valid or not, so an invalid file
	// is reported once rather than on every poll.
	lastHash [sha256.Size]byte
	// lastApplyErr is the last error of apply for content that decoded; apply
	// depends on other files (CA bundles), so it is retried on every poll but
	// logged and counted only when the error changes.
	lastApplyErr string
	current      *Config
}

// NewWatcher loads path once and applies it (an error here is fatal for the
// caller: there is no previous configuration to keep). Later changes are
// applied by Run; apply must either take the whole configuration or return
// an error and leave the previous one in force.
func NewWatcher(path string, interval time.Duration, clk clock.WithTicker, m *Metrics, apply func(*Config) error) (*Watcher, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("config check interval must be positive, got %s", interval)
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if err := apply(cfg); err != nil {
		return nil, fmt.Errorf("applying config file %s: %w", path, err)
	}
	m.reloads.WithLabelValues("success").Inc()
	m.lastSuccess.Set(float64(clk.Now().Unix()))
	return &Watcher{
		path:     path,
		interval: interval,
		clock:    clk,
		metrics:  m,
		apply:    apply,
		lastHash: sha256.Sum256(data),
		current:  cfg,
	}, nil
}

// Current returns the configuration in force.
func (w *Watcher) Current() *Config {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Run checks the file every interval until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("file", w.path)
	t := w.clock.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			w.Check(klog.NewContext(ctx, logger))
		}
	}
}

// Check reads the file once and, if its content changed, validates and
// applies it. It reports whether a new configuration was applied.
func (w *Watcher) Check(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	data, err := readFile(w.path)
	if err != nil {
		// A ConfigMap update swaps a symlink; a read in between may fail.
		// Keep the old configuration and try again next time.
		logger.V(2).Info("Config file not readable, keeping the current configuration", "err", err)
		return false
	}
	sum := sha256.Sum256(data)
	w.mu.Lock()
	defer w.mu.Unlock()
	if sum == w.lastHash {
		return false
	}
	cfg, err := Decode(data)
	if err != nil {
		w.lastHash = sum
		w.metrics.reloads.WithLabelValues("failure").Inc()
		logger.Error(err, "Config file changed but is invalid, keeping the current configuration")
		return false
	}
	if err := w.apply(cfg); err != nil {
		if msg := err.Error(); msg != w.lastApplyErr {
			w.lastApplyErr = msg
			w.metrics.reloads.WithLabelValues("failure").Inc()
			logger.Error(err, "Config file changed but cannot be applied, keeping the current configuration")
		}
		return false
	}
	w.lastHash, w.lastApplyErr, w.current = sum, "", cfg
	w.metrics.reloads.WithLabelValues("success").Inc()
	w.metrics.lastSuccess.Set(float64(w.clock.Now().Unix()))
	logger.Info("Config file reloaded", "sources", len(cfg.Sources), "stepPolicies", len(cfg.StepPolicies))
	return true
}
