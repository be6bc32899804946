package delegate

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/metrics/pkg/apis/external_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// fakeOwn stands for capscale's own provider.
type fakeOwn struct{ calls []string }

func (f *fakeOwn) ListAllExternalMetrics() []cmprovider.ExternalMetricInfo {
	return []cmprovider.ExternalMetricInfo{{Metric: "capscale-load-index"}, {Metric: "capscale-total-qps"}}
}

func (f *fakeOwn) GetExternalMetric(_ context.Context, _ string, _ labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	f.calls = append(f.calls, info.Metric)
	return &external_metrics.ExternalMetricValueList{}, nil
}

type fakeBackend struct{ calls []string }

func (f *fakeBackend) Get(_ context.Context, namespace, metric string, _ labels.Selector) (*external_metrics.ExternalMetricValueList, error) {
	f.calls = append(f.calls, namespace+"/"+metric)
	return &external_metrics.ExternalMetricValueList{}, nil
}

func metricNames(l []cmprovider.ExternalMetricInfo) []string {
	out := make([]string, len(l))
	for i, m := range l {
		out[i] = m.Metric
	}
	return out
}

func TestProviderRoutes(t *testing.T) {
	own, b := &fakeOwn{}, &fakeBackend{}
	p := NewProvider(own)
	ctx := context.Background()
	get := func(metric string) {
		if _, err := p.GetExternalMetric(ctx, "shop", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: metric}); err != nil {
			t.Fatal(err)
		}
	}
	// No delegate: capscale answers everything (404 for unknown names).
	get("queue-length")
	p.SetDelegate(b, []string{"queue-length", "capscale-load-index", "capscale-shadow", "queue-length"})
	get("capscale-load-index")
	get("capscale-anything")
	get("queue-length")
	if got, want := own.calls, []string{"queue-length", "capscale-load-index", "capscale-anything"}; !equal(got, want) {
		t.Errorf("capscale answered %v, want %v", got, want)
	}
	if got, want := b.calls, []string{"shop/queue-length"}; !equal(got, want) {
		t.Errorf("delegate answered %v, want %v", got, want)
	}
	// Discovery lists both, capscale's names once, the delegate's own names
	// once; a capscale-* name of the delegate is capscale's.
	if got, want := metricNames(p.ListAllExternalMetrics()), []string{"capscale-load-index", "capscale-total-qps", "queue-length"}; !equal(got, want) {
		t.Errorf("list = %v, want %v", got, want)
	}
	p.SetDelegate(nil, nil)
	get("queue-length")
	if len(b.calls) != 1 {
		t.Errorf("forwarded after the delegate was removed: %v", b.calls)
	}
	if got := metricNames(p.ListAllExternalMetrics()); len(got) != 2 {
		t.Errorf("list without delegate = %v", got)
	}
}
