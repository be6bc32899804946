package capacitysource

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the mirror's Prometheus series.
type Metrics struct {
	evaluations *prometheus.CounterVec
	evalSeconds prometheus.Histogram
	patches     *prometheus.CounterVec
	nodes       *prometheus.GaugeVec
}

// NewMetrics registers the mirror's series with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capscale_controller_capacity_source_evaluations_total",
			Help: "Capacity-source objects evaluated (once per object change), by source and result: valid (a count), invalid (the capacity expression gave none) or no_node (the node expression failed).",
		}, []string{"source", "result"}),
		evalSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "capscale_controller_capacity_source_evaluation_duration_seconds",
			Help:    "Time to evaluate one capacity-source object's node and capacity expressions.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10),
		}),
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capscale_controller_capacity_source_node_patches_total",
			Help: "Node patches writing a mirrored underlay-IP capacity, by result (success, error).",
		}, []string{"result"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capscale_controller_capacity_source_nodes",
			Help: `Nodes whose underlay-IP capacity a capacity source gives, by source ("*": more than one) and state (valid, invalid).`,
		}, []string{"source", "state"}),
	}
	if reg != nil {
		reg.MustRegister(m.evaluations, m.evalSeconds, m.patches, m.nodes)
	}
	return m
}

func (m *Metrics) evaluated(source string, r Result, d time.Duration) {
	result := "valid"
	switch {
	case r.NodeErr != "":
		result = "no_node"
	case r.Err != "":
		result = "invalid"
	}
	m.evaluations.WithLabelValues(source, result).Inc()
	m.evalSeconds.Observe(d.Seconds())
}

func (m *Metrics) patched(result string) { m.patches.WithLabelValues(result).Inc() }
