// Package kedascaler serves KEDA's external-scaler gRPC protocol
// (externalscaler.proto: IsActive, StreamIsActive, GetMetricSpec,
// GetMetrics) for clusters where KEDA keeps the external-metrics APIService.
// A ScaledObject's `external` trigger names a capscale metric and its labels
// in its metadata; every value comes from the same ExternalMetricsProvider
// that answers external.metrics.k8s.io, so both paths share one rule, one
// freshness check and one set of errors.
package kedascaler

import (
	"fmt"
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/metricsadapter/provider"
)

// Trigger metadata keys capscale reads. KEDA sends the trigger's whole
// metadata (scalerAddress, enableTLS, ... too); other keys are KEDA's and
// are ignored.
const (
	// KeyMetric names the capscale external metric, e.g. capscale-load-index.
	KeyMetric = "metric"
	// KeyTarget is the HPA target per replica (KEDA's targetSizeFloat).
	KeyTarget = "targetValue"
	// KeyActivation is the value above which IsActive is true (default 0).
	KeyActivation = "activationThreshold"
)

// labelKeys are the metadata keys that become the metric's label selector,
// exactly as an HPA's metric.selector.matchLabels would give them.
var labelKeys = []string{provider.LabelSource, provider.LabelWorkload, provider.LabelPolicy}

// Trigger is what a ScaledObject's trigger metadata asks for.
type Trigger struct {
	// Metric is the external metric name.
	Metric string
	// Selector holds the metadata's label keys (source, workload, policy);
	// the provider checks that they are the ones Metric needs.
	Selector labels.Selector
	// Target is the value per replica the HPA aims at.
	Target float64
	// Activation: IsActive is Value > Activation.
	Activation float64
}

// MetadataError is a missing or malformed trigger metadata key.
type MetadataError struct {
	Key     string
	Problem string
}

func (e *MetadataError) Error() string {
	return fmt.Sprintf("trigger metadata %q: %s", e.Key, e.Problem)
}

// ParseTrigger reads a trigger's metadata. capscale-desired-replicas is a
// replica count, so its target is 1 (a ScaledObject may say so or leave it
// out); every other metric needs targetValue.
func ParseTrigger(md map[string]string) (Trigger, error) {
	t := Trigger{Metric: md[KeyMetric]}
	if t.Metric == "" {
		return Trigger{}, &MetadataError{Key: KeyMetric, Problem: fmt.Sprintf("missing: name a capscale metric, e.g. %s or %s", names.LoadIndexMetric, names.DesiredReplicasMetric)}
	}

	set := labels.Set{}
	for _, k := range labelKeys {
		if v, ok := md[k]; ok {
			set[k] = v
		}
	}
	sel, err := labels.ValidatedSelectorFromSet(set)
	if err != nil {
		return Trigger{}, &MetadataError{Key: "labels", Problem: err.Error()}
	}
	t.Selector = sel

	raw, given := md[KeyTarget]
	switch {
	case t.Metric == names.DesiredReplicasMetric:
		t.Target = 1
		if given {
			if v, err := parseNumber(raw); err != nil || v != 1 {
				return Trigger{}, &MetadataError{Key: KeyTarget, Problem: fmt.Sprintf("%s is a replica count: its target is 1 (or leave %s out), got %q", t.Metric, KeyTarget, raw)}
			}
		}
	case !given:
		return Trigger{}, &MetadataError{Key: KeyTarget, Problem: fmt.Sprintf("missing: %s needs the value per replica the HPA aims at", t.Metric)}
	default:
		if t.Target, err = parseNumber(raw); err != nil || t.Target <= 0 {
			return Trigger{}, &MetadataError{Key: KeyTarget, Problem: fmt.Sprintf("must be a number > 0, got %q", raw)}
		}
	}

	if raw, ok := md[KeyActivation]; ok {
		if t.Activation, err = parseNumber(raw); err != nil || t.Activation < 0 {
			return Trigger{}, &MetadataError{Key: KeyActivation, Problem: fmt.Sprintf("must be a number >= 0, got %q", raw)}
		}
	}
	return t, nil
}

// parseNumber accepts finite decimal numbers only.
func parseNumber(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not finite", s)
	}
	return v, nil
}
