// Package qps is the one home of the QPS rule: a workload's
// capscale.io/single-pod-qps and capscale.io/total-qps annotations, parsed
// exactly, give ceil(total / single-pod QPS) replicas, and the ready
// replicas give the QPS served. The metrics adapter's QPS metrics and the
// ElasticWeb controller both call it, so they cannot disagree. Nothing here
// talks to Kubernetes or the network.
package qps

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/capscale/capscale/internal/names"
)

// maxQPSLen bounds an annotation value; no sensible QPS needs more digits.
const maxQPSLen = 40

// AnnotationError says which workload annotation is missing or malformed.
type AnnotationError struct {
	// Annotation is the annotation key, e.g. capscale.io/single-pod-qps.
	Annotation string
	// Value is the raw value; empty when the annotation is absent.
	Value string
	// Missing is true when the annotation is not set at all.
	Missing bool
	// Reason explains what is wrong with Value.
	Reason string
}

// Error names the annotation and what is wrong with it.
func (e *AnnotationError) Error() string {
	if e.Missing {
		return fmt.Sprintf("annotation %s is not set", e.Annotation)
	}
	return fmt.Sprintf("annotation %s=%q: %s", e.Annotation, e.Value, e.Reason)
}

// Value is one parsed QPS annotation. Rat keeps the decimal exactly so
// that ceil(total/single) is not thrown off by binary floating point
// (1.1/0.1 is 11.000000000000002 in float64).
type Value struct {
	Float float64
	Rat   *big.Rat
}

// ParseSinglePod reads capscale.io/single-pod-qps, which must be a finite
// number greater than zero.
func ParseSinglePod(annotations map[string]string) (Value, error) {
	v, err := parseQPS(annotations, names.SinglePodQPSAnnotation)
	if err != nil {
		return Value{}, err
	}
	if v.Rat.Sign() <= 0 {
		return Value{}, &AnnotationError{
			Annotation: names.SinglePodQPSAnnotation,
			Value:      annotations[names.SinglePodQPSAnnotation],
			Reason:     "must be greater than 0",
		}
	}
	return v, nil
}

// ParseTotal reads capscale.io/total-qps, which must be a finite number
// of at least zero.
func ParseTotal(annotations map[string]string) (Value, error) {
	v, err := parseQPS(annotations, names.TotalQPSAnnotation)
	if err != nil {
		return Value{}, err
	}
	if v.Rat.Sign() < 0 {
		return Value{}, &AnnotationError{
			Annotation: names.TotalQPSAnnotation,
			Value:      annotations[names.TotalQPSAnnotation],
			Reason:     "must not be negative",
		}
	}
	return v, nil
}

func parseQPS(annotations map[string]string, key string) (Value, error) {
	raw, ok := annotations[key]
	if !ok {
		return Value{}, &AnnotationError{Annotation: key, Missing: true}
	}
	s := strings.TrimSpace(raw)
	bad := func(reason string) error {
		return &AnnotationError{Annotation: key, Value: raw, Reason: reason}
	}
	// strconv is the gate: it rejects fractions ("1/3") that big.Rat would
	// accept, and tells us about NaN, Inf and overflow.
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return Value{}, bad("not a finite decimal number")
	}
	if len(s) > maxQPSLen {
		return Value{}, bad(fmt.Sprintf("longer than %d characters", maxQPSLen))
	}
	var r *big.Rat
	if strings.ContainsAny(s, "eEpPxX") {
		// An exponent could make big.Rat build a huge power of ten
		// ("1e-99999999"); the float64 value is exact enough here.
		r = new(big.Rat).SetFloat64(f)
	} else if r, ok = new(big.Rat).SetString(s); !ok {
		return Value{}, bad("not a finite decimal number")
	}
	return Value{Float: f, Rat: r}, nil
}

// DesiredReplicas returns ceil(total / single), capped at MaxInt32 (the
// largest replica count Kubernetes accepts). single must be > 0, as
// ParseSinglePod guarantees; a non-positive single returns 0 rather than
// dividing by zero.
func DesiredReplicas(total, single Value) int64 {
	if single.Rat == nil || total.Rat == nil || single.Rat.Sign() <= 0 || total.Rat.Sign() <= 0 {
		return 0
	}
	q := new(big.Rat).Quo(total.Rat, single.Rat)
	// ceil(a/b) for positive a, b: (a + b - 1) / b on the integer form.
	num, den := q.Num(), q.Denom()
	c := new(big.Int).Add(num, new(big.Int).Sub(den, big.NewInt(1)))
	c.Quo(c, den)
	if !c.IsInt64() || c.Int64() > math.MaxInt32 {
		return math.MaxInt32
	}
	return c.Int64()
}

// DesiredReplicasFromAnnotations parses both QPS annotations and applies
// DesiredReplicas.
func DesiredReplicasFromAnnotations(annotations map[string]string) (int64, error) {
	single, err := ParseSinglePod(annotations)
	if err != nil {
		return 0, err
	}
	total, err := ParseTotal(annotations)
	if err != nil {
		return 0, err
	}
	return DesiredReplicas(total, single), nil
}

// Real is the QPS the ready replicas can serve: ready × single-pod QPS.
func Real(readyReplicas int32, single Value) float64 {
	if readyReplicas <= 0 {
		return 0
	}
	return float64(readyReplicas) * single.Float
}
