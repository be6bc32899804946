package elasticweb

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the controller's Prometheus series.
type Metrics struct {
	reconciles *prometheus.CounterVec
	duration   prometheus.Histogram
	applies    *prometheus.CounterVec
}

// NewMetrics registers the controller's series with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capscale_controller_elasticweb_reconciles_total",
			Help: "ElasticWeb reconciles by result: success, conflict (an object not ours is in the way) or error.",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "capscale_controller_elasticweb_reconcile_duration_seconds",
			Help:    "Time to reconcile one ElasticWeb, API calls included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capscale_controller_elasticweb_applies_total",
			Help: "Server-side applies of ElasticWeb objects by kind and action (Create, Update).",
		}, []string{"kind", "action"}),
	}
	if reg != nil {
		reg.MustRegister(m.reconciles, m.duration, m.applies)
	}
	return m
}

func (m *Metrics) observe(err error, d time.Duration) {
	result := "success"
	switch {
	case errors.Is(err, errConflict):
		result = "conflict"
	case err != nil:
		result = "error"
	}
	m.reconciles.WithLabelValues(result).Inc()
	m.duration.Observe(d.Seconds())
}

func (m *Metrics) applied(kind string, a Action) { m.applies.WithLabelValues(kind, string(a)).Inc() }

// NewLeaderGauge returns capscale_controller_leader, which reads leading at
// scrape time: 1 while this replica holds the Lease and runs the
// controllers, else 0. It lives here, beside the controller's other series,
// so that docs/ can list it without running the command.
func NewLeaderGauge(leading func() bool) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "capscale_controller_leader",
		Help: "1 while this replica holds the Lease and runs the controllers.",
	}, func() float64 {
		if leading() {
			return 1
		}
		return 0
	})
}
