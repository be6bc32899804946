package servingcert

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the Manager's Prometheus collectors.
type Metrics struct {
	rotations      *prometheus.CounterVec
	caBundleWrites prometheus.Counter
	errors         prometheus.Counter
	notAfter       prometheus.Gauge
}

// NewMetrics builds the collectors; Register adds them to a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		rotations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "capscale", Subsystem: "serving_cert", Name: "issued_total",
			Help: "Certificates made by the serving-certificate manager, by kind (ca, certificate).",
		}, []string{"kind"}),
		caBundleWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "capscale", Subsystem: "serving_cert", Name: "cabundle_restored_total",
			Help: "Times the APIService's caBundle, changed by someone else, was put back.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "capscale", Subsystem: "serving_cert", Name: "sync_errors_total",
			Help: "Failed reconciliations of the serving Secret and the APIService's caBundle (retried with backoff).",
		}),
		notAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "capscale", Subsystem: "serving_cert", Name: "not_after_seconds",
			Help: "Expiry of the serving certificate served now, Unix seconds.",
		}),
	}
}

// Register adds every collector to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.rotations, m.caBundleWrites, m.errors, m.notAfter} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
