package provider

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/qps"
)

// Metrics are the provider's own metrics.
type Metrics struct {
	requests *prometheus.CounterVec
}

func newMetrics() *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capscale_adapter_requests_total",
			Help: "External-metric requests answered by the provider, by metric and HTTP status code.",
		}, []string{"metric", "code"}),
	}
	return m
}

func (m *Metrics) observe(metric string, err error) {
	known := false
	for _, i := range allMetrics {
		if i.Metric == metric {
			known = true
			break
		}
	}
	if !known {
		// Bound the label: any name can be requested.
		metric = "unknown"
	}
	code := int32(200)
	if err != nil {
		code = statusCode(err)
	}
	m.requests.WithLabelValues(metric, strconv.Itoa(int(code))).Inc()
}

var descRealQPS = prometheus.NewDesc("capscale_adapter_real_qps",
	"QPS the ready replicas of a workload can serve (ready replicas x "+names.SinglePodQPSAnnotation+"); only workloads with a valid annotation.",
	[]string{"namespace", "workload"}, nil)

// realQPSCollector computes capscale_adapter_real_qps from the informer
// caches at scrape time, so deleted or unannotated workloads leave no stale
// series behind.
type realQPSCollector struct{ p *Provider }

func (c realQPSCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descRealQPS }

func (c realQPSCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	emit := func(w workload) {
		key := w.namespace + "/" + w.name
		// A Deployment wins over a StatefulSet of the same name, as in the
		// metric API.
		if seen[key] {
			return
		}
		single, err := qps.ParseSinglePod(w.annotations)
		if err != nil {
			return
		}
		seen[key] = true
		ch <- prometheus.MustNewConstMetric(descRealQPS, prometheus.GaugeValue, qps.Real(w.readyReplicas, single), w.namespace, w.name)
	}
	if ds, err := c.p.deployments.List(labels.Everything()); err == nil {
		for _, d := range ds {
			if _, ok := d.Annotations[names.SinglePodQPSAnnotation]; ok {
				emit(fromDeployment(d))
			}
		}
	}
	if ss, err := c.p.statefulSets.List(labels.Everything()); err == nil {
		for _, s := range ss {
			if _, ok := s.Annotations[names.SinglePodQPSAnnotation]; ok {
				emit(fromStatefulSet(s))
			}
		}
	}
}

// Register adds the provider's metrics, including capscale_adapter_real_qps,
// to reg.
func (p *Provider) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{p.metrics.requests, realQPSCollector{p}} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
