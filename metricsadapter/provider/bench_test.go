package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/metricsadapter/config"
)

// BenchmarkGetExternalMetric answers requests round-robin over 1000 series of
// each metric kind, all served from caches.
func BenchmarkGetExternalMetric(b *testing.B) {
	const n = 1000
	sources := fakeSources{}
	var objs []runtime.Object
	var policies []config.StepPolicy
	for i := 0; i < n; i++ {
		src := fmt.Sprintf("src-%d", i)
		sources[src] = reading(float64(i%100)/100, now.Add(-10*time.Second))
		objs = append(objs, deployment("web", fmt.Sprintf("web-%d", i), 2, 2, qpsAnn("800", "500")))
		gpu := fmt.Sprintf("gpu-%d", i)
		objs = append(objs, deployment("ai", gpu, 4, 4, nil),
			pod("ai", gpu, gpu+"-a", time.Hour), pod("ai", gpu, gpu+"-b", time.Hour), pod("ai", gpu, gpu+"-c", time.Minute))
		if i%10 == 0 {
			recent := now.Add(-time.Minute)
			objs = append(objs, hpa("ai", gpu, "Deployment", gpu, &recent))
		}
		sp := gpuPolicy("ai", "Deployment", gpu)
		sp.Source = src
		policies = append(policies, sp)
	}
	p, _ := newTestProvider(b, sources, objs...)
	p.SetStepPolicies(policies)

	type req struct {
		ns  string
		sel labels.Selector
	}
	series := func(ns string, f func(i int) labels.Set) []req {
		out := make([]req, n)
		for i := range out {
			out[i] = req{ns, labels.SelectorFromSet(f(i))}
		}
		return out
	}
	cases := []struct {
		name   string
		metric string
		reqs   []req
	}{
		{"load-index", names.LoadIndexMetric, series("web", func(i int) labels.Set { return labels.Set{"source": fmt.Sprintf("src-%d", i)} })},
		{"qps", names.DesiredReplicasMetric, series("web", func(i int) labels.Set {
			return labels.Set{"workload": fmt.Sprintf("web-%d", i), "policy": "qps"}
		})},
		{"load-step", names.DesiredReplicasMetric, series("ai", func(i int) labels.Set {
			return labels.Set{"workload": fmt.Sprintf("gpu-%d", i), "policy": "load-step"}
		})},
		{"real-qps", names.RealQPSMetric, series("web", func(i int) labels.Set { return labels.Set{"workload": fmt.Sprintf("web-%d", i)} })},
	}
	ctx := context.Background()
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			info := cmprovider.ExternalMetricInfo{Metric: c.metric}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := c.reqs[i%n]
				i++
				if _, err := p.GetExternalMetric(ctx, r.ns, r.sel, info); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
