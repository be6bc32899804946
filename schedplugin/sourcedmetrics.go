package schedplugin

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/capscale/capscale/controller/capacitysource"
)

// readMetrics are capscale-scheduler's series of its own read of the
// capacity sources (capacitySources), served on kube-scheduler's /metrics.
// The read is one per process (shared), and so are they.
type readMetrics struct {
	view *capacitysource.Metrics
	// synced and nodes say whether the scheduler has read what the pods
	// wait on: until synced, every node counts 0 (capacity source not
	// read yet).
	synced prometheus.Gauge
	nodes  prometheus.Gauge
}

func newReadMetrics(reg prometheus.Registerer) *readMetrics {
	m := &readMetrics{
		view: capacitysource.NewSchedulerViewMetrics(reg),
		synced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "capscale_scheduler_capacity_sources_synced",
			Help: "1 once capscale-scheduler has read its capacity sources' objects and every Node (plugin arg capacitySources), else 0: until then every node counts 0 underlay IPs (capacity source not read yet).",
		}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "capscale_scheduler_capacity_source_nodes_read",
			Help: "Nodes capscale-scheduler has read its capacity sources' answer for (plugin arg capacitySources).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.synced, m.nodes)
	}
	return m
}

var processMetrics struct {
	once sync.Once
	m    *readMetrics
}

// processReadMetrics are the process's series, registered with
// kube-scheduler's registry (component-base's legacy registry, which its
// /metrics serves) on first use.
func processReadMetrics() *readMetrics {
	processMetrics.once.Do(func() { processMetrics.m = newReadMetrics(legacyregistry.Registerer()) })
	return processMetrics.m
}

// RegisterReadMetrics registers the series of the sources' read with reg,
// for the reference's table (docs/metrics.go).
func RegisterReadMetrics(reg prometheus.Registerer) { newReadMetrics(reg) }
