package delegate

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count and time the requests forwarded to the delegate.
type Metrics struct {
	requests *prometheus.CounterVec
	duration prometheus.Histogram
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capscale_adapter_delegate_requests_total",
			Help: "External-metric requests forwarded to the delegate (the APIService's previous owner), by the HTTP status code answered; failures to reach it count as 503.",
		}, []string{"code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "capscale_adapter_delegate_request_duration_seconds",
			Help:    "Latency of external-metric requests forwarded to the delegate, failures included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
}

// Register adds the metrics to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *Metrics) observe(code int32, d time.Duration) {
	m.requests.WithLabelValues(strconv.Itoa(int(code))).Inc()
	m.duration.Observe(d.Seconds())
}
