package docs

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/controller/elasticweb"
	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/extender/binderlease"
	"github.com/capscale/capscale/extender/devices"
	"github.com/capscale/capscale/extender/publisher"
	"github.com/capscale/capscale/extender/release"
	"github.com/capscale/capscale/extender/sourced"
	"github.com/capscale/capscale/extender/wire"
	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/underlay"
	"github.com/capscale/capscale/metricsadapter/config"
	"github.com/capscale/capscale/metricsadapter/delegate"
	"github.com/capscale/capscale/metricsadapter/kedascaler"
	"github.com/capscale/capscale/metricsadapter/provider"
	"github.com/capscale/capscale/metricsadapter/source"
	"github.com/capscale/capscale/schedplugin"
	"github.com/capscale/capscale/workload"
)

// Metric is one capscale_* series family a component registers.
type Metric struct {
	Name   string
	Type   string // counter, gauge, histogram or summary
	Labels []string
	Help   string
}

// Component is one binary's capscale_* metrics.
type Component struct {
	Name    string
	Metrics []Metric
}

// collectorTypes are the types of the metrics that custom collectors emit
// as const metrics at scrape time: with no data (no source configured, no
// workload) they emit nothing, so the type cannot be read from a sample.
// A collector metric missing here fails Components.
var collectorTypes = map[string]string{
	"capscale_adapter_real_qps":                              "gauge",
	"capscale_adapter_source_last_success_timestamp_seconds": "gauge",
	"capscale_adapter_source_sample_age_seconds":             "gauge",
	"capscale_adapter_source_stale":                          "gauge",
	"capscale_adapter_source_value":                          "gauge",
}

// recorder is a Registerer that keeps every collector registered on it.
type recorder struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func newRecorder() *recorder { return &recorder{Registry: prometheus.NewRegistry()} }

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Components builds each binary's metric sets the way its cmd/<bin>/app
// does — the same constructors, on a fake clientset — and lists every
// capscale_* metric they register.
func Components() ([]Component, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()

	type build func(reg *recorder) error
	comps := []struct {
		name  string
		build build
	}{
		{"extender", func(reg *recorder) error {
			m := extender.NewMetrics(reg)
			ledger := extender.NewLedger(extender.LedgerOptions{DefaultCapacity: 10})
			extender.RegisterLedger(reg, ledger)
			extender.RegisterWaiting(reg, nil)
			wire.NewHandler(wire.HandlerOptions{Ledger: ledger, Metrics: m, Registerer: reg, Gatherer: reg})
			httpserver.ConnCounter("extender", reg)
			factory := informers.NewSharedInformerFactory(cs, 0)
			if _, err := publisher.New(cs, factory.Core().V1().Nodes(), publisher.Options{Rule: underlay.Rule{Default: 10}, Registerer: reg}); err != nil {
				return err
			}
			if _, err := release.New(cs, factory.Core().V1().Nodes(), reg); err != nil {
				return err
			}
			// DRA mode's device publisher, with the kubelet-plugin gate on.
			if _, err := devices.New(cs, factory.Core().V1().Nodes(), devices.Options{Rule: underlay.Rule{Default: 10}, Registerer: reg,
				PluginSelector: labels.SelectorFromSet(labels.Set{"app": "kubelet-plugin"}), PluginNamespace: "capscale-system"}); err != nil {
				return err
			}
			// Native mode's own read of the capacity sources (--capacity-sources).
			sourced.New(factory.Core().V1().Nodes().Lister(), reg)
			capacitysource.NewExtenderViewMetrics(reg)
			_, err := binderlease.New(cs, "capscale-system", "capscale-scheduler", reg)
			return err
		}},
		{"metrics-adapter", func(reg *recorder) error {
			sources := source.NewManager(ctx, clock.RealClock{}, source.NewMetrics())
			defer sources.Stop()
			p, err := provider.New(provider.Options{Informers: informers.NewSharedInformerFactory(cs, 0), Sources: sources})
			if err != nil {
				return err
			}
			for _, r := range []interface {
				Register(prometheus.Registerer) error
			}{sources, config.NewMetrics(), p, delegate.NewMetrics(), kedascaler.NewMetrics()} {
				if err := r.Register(reg); err != nil {
					return err
				}
			}
			return nil
		}},
		{"workload-api", func(reg *recorder) error {
			workload.New(workload.Config{Informers: informers.NewSharedInformerFactory(cs, 0), Registry: reg, Gatherer: reg})
			return nil
		}},
		{"scheduler", func(reg *recorder) error {
			schedplugin.RegisterReadMetrics(reg)
			return nil
		}},
		{"controller", func(reg *recorder) error {
			elasticweb.NewMetrics(reg)
			capacitysource.NewMetrics(reg)
			reg.MustRegister(elasticweb.NewLeaderGauge(func() bool { return false }))
			return nil
		}},
	}

	var out []Component
	for _, c := range comps {
		reg := newRecorder()
		if err := c.build(reg); err != nil {
			return nil, fmt.Errorf("building %s's metrics: %w", c.name, err)
		}
		ms, err := metricsOf(reg.collectors)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		out = append(out, Component{Name: c.name, Metrics: ms})
	}
	return out, nil
}

// descRE reads prometheus.Desc.String(), the one public view of a Desc's
// name, help and variable labels.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"),(?: unit: "(?:[^"\\]|\\.)*",)? constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

func metricsOf(collectors []prometheus.Collector) ([]Metric, error) {
	var out []Metric
	for _, c := range collectors {
		typ := typeOf(c)
		descs := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(descs); close(descs) }()
		for d := range descs {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				return nil, fmt.Errorf("cannot read %s", d)
			}
			name, err1 := strconv.Unquote(m[1])
			help, err2 := strconv.Unquote(m[2])
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("cannot read %s", d)
			}
			if !strings.HasPrefix(name, "capscale_") {
				continue
			}
			var labels []string
			if m[4] != "" {
				labels = strings.Split(m[4], ",")
			}
			t := typ
			if t == "" {
				t = collectorTypes[name]
			}
			if t == "" {
				return nil, fmt.Errorf("metric %s comes from a custom collector: add its type to collectorTypes in docs/metrics.go", name)
			}
			out = append(out, Metric{Name: name, Type: t, Labels: labels, Help: help})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// typeOf is the type of a collector that is one metric or one vector of
// them, "" for any other collector.
func typeOf(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	m, ok := c.(prometheus.Metric)
	if !ok {
		return ""
	}
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		return ""
	}
	switch {
	case pb.Counter != nil:
		return "counter"
	case pb.Gauge != nil:
		return "gauge"
	case pb.Histogram != nil:
		return "histogram"
	case pb.Summary != nil:
		return "summary"
	}
	return ""
}

// MetricTable is the Markdown table of metrics: name, type, labels, help.
func MetricTable(ms []Metric) string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | help |\n|---|---|---|---|\n")
	for _, m := range ms {
		labels := make([]string, len(m.Labels))
		for i, l := range m.Labels {
			labels[i] = code(l)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", code(m.Name), m.Type, strings.Join(labels, ", "), cell(m.Help))
	}
	return b.String()
}
