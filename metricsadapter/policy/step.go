// Package policy holds the metrics adapter's load-step rule: a load index
// above or below a band adds or removes a step of replicas, within bounds,
// at most once per interval. It is a plain function over plain values; the
// provider feeds it and publishes what comes out. (The QPS rule, which the
// ElasticWeb controller shares, lives in internal/qps.)
package policy

import (
	"time"
)

// StepParams are the knobs of one load-step policy, already validated
// (ScaleDownBelow < ScaleUpAbove, 0 <= Min <= Max, steps >= 1).
type StepParams struct {
	ScaleUpAbove   float64
	ScaleDownBelow float64
	StepUp         int32
	StepDown       int32
	MinReplicas    int32
	MaxReplicas    int32
	// MinPodAge blocks scale-down while any pod is younger than this.
	MinPodAge time.Duration
	// Interval is the least time between two steps.
	Interval time.Duration
}

// StepInput is the observed state the rule is applied to.
type StepInput struct {
	// Current is the workload's spec.replicas.
	Current int32
	// Load is the source's load index.
	Load float64
	// PodCreationTimes are the creation times of the workload's live pods.
	PodCreationTimes []time.Time
	// Now is the evaluation time.
	Now time.Time
	// LastScaleTime is when the workload's replica count last changed; the
	// zero time means unknown (no step is held back).
	LastScaleTime time.Time
}

// StepReason names why the rule chose its answer; it is logged and shown in
// tests, never used as a metric label value beyond this fixed set.
type StepReason string

// The fixed set of StepReasons.
const (
	ReasonScaleUp        StepReason = "ScaleUp"
	ReasonScaleDown      StepReason = "ScaleDown"
	ReasonWithinBand     StepReason = "WithinBand"
	ReasonInterval       StepReason = "WithinInterval"
	ReasonYoungPod       StepReason = "PodYoungerThanMinPodAge"
	ReasonAtMaxReplicas  StepReason = "AtMaxReplicas"
	ReasonAtMinReplicas  StepReason = "AtMinReplicas"
	ReasonClampedToRange StepReason = "ClampedToRange"
)

// StepDecision is the rule's answer.
type StepDecision struct {
	Desired int32
	Reason  StepReason
}

// Step applies the load-step rule:
//
//   - within Interval of LastScaleTime: the current count (clamped);
//   - load > ScaleUpAbove: current + StepUp, at most MaxReplicas;
//   - load < ScaleDownBelow: current - StepDown, at least MinReplicas, unless a
//     pod is younger than MinPodAge (then unchanged);
//   - otherwise (including exactly at a threshold): unchanged.
//
// The answer is always within [MinReplicas, MaxReplicas].
func Step(p StepParams, in StepInput) StepDecision {
	current := in.Current
	if current < 0 {
		current = 0
	}
	clamped := clamp(current, p.MinReplicas, p.MaxReplicas)
	hold := func(reason StepReason) StepDecision {
		if clamped != current {
			return StepDecision{Desired: clamped, Reason: ReasonClampedToRange}
		}
		return StepDecision{Desired: clamped, Reason: reason}
	}

	if !in.LastScaleTime.IsZero() && in.Now.Sub(in.LastScaleTime) < p.Interval {
		return hold(ReasonInterval)
	}

	switch {
	case in.Load > p.ScaleUpAbove:
		if current >= p.MaxReplicas {
			return hold(ReasonAtMaxReplicas)
		}
		return StepDecision{Desired: clamp(addSat(current, p.StepUp), p.MinReplicas, p.MaxReplicas), Reason: ReasonScaleUp}
	case in.Load < p.ScaleDownBelow:
		if current <= p.MinReplicas {
			return hold(ReasonAtMinReplicas)
		}
		if youngest(in.PodCreationTimes, in.Now) < p.MinPodAge {
			return hold(ReasonYoungPod)
		}
		return StepDecision{Desired: clamp(current-p.StepDown, p.MinReplicas, p.MaxReplicas), Reason: ReasonScaleDown}
	default:
		return hold(ReasonWithinBand)
	}
}

// youngest returns the age of the youngest pod; with no pods it is larger
// than any MinPodAge.
func youngest(created []time.Time, now time.Time) time.Duration {
	age := time.Duration(1<<63 - 1)
	for _, c := range created {
		if a := now.Sub(c); a < age {
			age = a
		}
	}
	return age
}

func clamp(v, lo, hi int32) int32 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// addSat adds without overflowing int32.
func addSat(a, b int32) int32 {
	s := int64(a) + int64(b)
	if s > 1<<31-1 {
		return 1<<31 - 1
	}
	return int32(s)
}
