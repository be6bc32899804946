// Package delegate lets capscale's adapter share the one external-metrics
// APIService: capscale answers its own metrics (capscale-*) and forwards
// every other request to the server it took the APIService over from, the
// delegate, whose record lives on the APIService (package apiservice).
package delegate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/metrics/pkg/apis/external_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/capscale/capscale/internal/names"
)

// Backend is the delegate as the provider sees it.
type Backend interface {
	Get(ctx context.Context, namespace, metric string, selector labels.Selector) (*external_metrics.ExternalMetricValueList, error)
}

// Provider answers capscale-* itself and everything else from the current
// delegate, if any. The caller has been authenticated and authorized by the
// generic API server's filters (a SubjectAccessReview for the metric in the
// namespace) before either is asked.
type Provider struct {
	own     cmprovider.ExternalMetricsProvider
	backend atomic.Pointer[Backend]
	// list is what discovery returns: capscale's metrics and the delegate's.
	list atomic.Pointer[[]cmprovider.ExternalMetricInfo]
	// shadowed remembers the delegate's names capscale also serves, so each
	// is logged once.
	shadowed sync.Map
}

var _ cmprovider.ExternalMetricsProvider = (*Provider)(nil)

// NewProvider wraps own; without a delegate it behaves exactly as own.
func NewProvider(own cmprovider.ExternalMetricsProvider) *Provider {
	p := &Provider{own: own}
	p.SetDelegate(nil, nil)
	return p
}

// Owns reports whether capscale answers metric itself.
func Owns(metric string) bool { return strings.HasPrefix(metric, names.OwnMetricPrefix) }

// SetDelegate switches to backend (nil: no delegate) and the metric names it
// advertises.
func (p *Provider) SetDelegate(b Backend, advertised []string) {
	if b == nil {
		p.backend.Store(nil)
	} else {
		p.backend.Store(&b)
	}
	p.SetAdvertised(advertised)
}

// SetAdvertised replaces the delegate's advertised names; a name capscale
// serves itself is dropped (capscale wins) and logged once.
func (p *Provider) SetAdvertised(advertised []string) {
	own := p.own.ListAllExternalMetrics()
	list := make([]cmprovider.ExternalMetricInfo, 0, len(own)+len(advertised))
	list = append(list, own...)
	seen := make(map[string]bool, cap(list))
	for _, m := range own {
		seen[m.Metric] = true
	}
	for _, name := range advertised {
		if Owns(name) {
			if _, logged := p.shadowed.LoadOrStore(name, true); !logged {
				klog.InfoS("The delegate serves a metric named like capscale's; capscale answers it", "metric", name)
			}
			continue
		}
		if !seen[name] {
			seen[name] = true
			list = append(list, cmprovider.ExternalMetricInfo{Metric: name})
		}
	}
	p.list.Store(&list)
}

// ListAllExternalMetrics implements provider.ExternalMetricsProvider: a
// precomputed slice, so that discovery never waits on the delegate.
func (p *Provider) ListAllExternalMetrics() []cmprovider.ExternalMetricInfo {
	return *p.list.Load()
}

// GetExternalMetric implements provider.ExternalMetricsProvider.
func (p *Provider) GetExternalMetric(ctx context.Context, namespace string, selector labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	b := p.backend.Load()
	if Owns(info.Metric) || b == nil {
		return p.own.GetExternalMetric(ctx, namespace, selector, info)
	}
	list, err := (*b).Get(ctx, namespace, info.Metric, selector)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Forwarded external metric request failed", "namespace", namespace, "metric", info.Metric, "err", err)
		return nil, err
	}
	return list, nil
}

// String names the provider for logs.
func (p *Provider) String() string {
	if p.backend.Load() == nil {
		return "capscale only"
	}
	return fmt.Sprintf("capscale and a delegate (%d metrics listed)", len(*p.list.Load()))
}
