package policy

import (
	"testing"
	"time"
)

func TestStep(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	gpu := StepParams{
		ScaleUpAbove:   0.8,
		ScaleDownBelow: 0.5,
		StepUp:         3,
		StepDown:       1,
		MinReplicas:    0,
		MaxReplicas:    20,
		MinPodAge:      10 * time.Minute,
		Interval:       5 * time.Minute,
	}
	old := []time.Time{now.Add(-time.Hour), now.Add(-11 * time.Minute)}
	young := []time.Time{now.Add(-time.Hour), now.Add(-9 * time.Minute)}

	tests := []struct {
		name   string
		params StepParams
		in     StepInput
		want   StepDecision
	}{
		{
			name: "above threshold adds stepUp",
			in:   StepInput{Current: 4, Load: 0.83, PodCreationTimes: old, Now: now},
			want: StepDecision{Desired: 7, Reason: ReasonScaleUp},
		},
		{
			name: "exactly at scaleUpAbove is unchanged",
			in:   StepInput{Current: 4, Load: 0.8, PodCreationTimes: old, Now: now},
			want: StepDecision{Desired: 4, Reason: ReasonWithinBand},
		},
		{
			name: "exactly at scaleDownBelow is unchanged",
			in:   StepInput{Current: 4, Load: 0.5, PodCreationTimes: old, Now: now},
			want: StepDecision{Desired: 4, Reason: ReasonWithinBand},
		},
		{
			name: "just below scaleDownBelow removes stepDown",
			in:   StepInput{Current: 4, Load: 0.4999, PodCreationTimes: old, Now: now},
			want: StepDecision{Desired: 3, Reason: ReasonScaleDown},
		},
		{
			name: "just above scaleUpAbove adds stepUp",
			in:   StepInput{Current: 0, Load: 0.8001, Now: now},
			want: StepDecision{Desired: 3, Reason: ReasonScaleUp},
		},
		{
			name: "scale up stops at max",
			in:   StepInput{Current: 19, Load: 0.95, PodCreationTimes: old, Now: now},
			want: StepDecision{Desired: 20, Reason: ReasonScaleUp},
		},
		{
			name: "at max stays at max",
			in:   StepInput{Current: 20, Load: 0.95, PodCreationTimes: old, Now: now},
			want: StepDecision{Desired: 20, Reason: ReasonAtMaxReplicas},
		},
		{
			name: "above max is clamped even when load is high",
			in:   StepInput{Current: 25, Load: 0.95, PodCreationTimes: old, Now: now},
			want: StepDecision{Desired: 20, Reason: ReasonClampedToRange},
		},
		{
			name: "at min stays at min",
			in:   StepInput{Current: 0, Load: 0.1, Now: now},
			want: StepDecision{Desired: 0, Reason: ReasonAtMinReplicas},
		},
		{
			name:   "scale down stops at a non-zero min",
			params: withMinMax(gpu, 2, 20),
			in:     StepInput{Current: 3, Load: 0.1, PodCreationTimes: old, Now: now},
			want:   StepDecision{Desired: 2, Reason: ReasonScaleDown},
		},
		{
			name:   "below min is raised to min within the band",
			params: withMinMax(gpu, 2, 20),
			in:     StepInput{Current: 1, Load: 0.6, PodCreationTimes: old, Now: now},
			want:   StepDecision{Desired: 2, Reason: ReasonClampedToRange},
		},
		{
			name: "young pod blocks scale down",
			in:   StepInput{Current: 4, Load: 0.2, PodCreationTimes: young, Now: now},
			want: StepDecision{Desired: 4, Reason: ReasonYoungPod},
		},
		{
			name: "pod exactly minPodAge old allows scale down",
			in:   StepInput{Current: 4, Load: 0.2, PodCreationTimes: []time.Time{now.Add(-10 * time.Minute)}, Now: now},
			want: StepDecision{Desired: 3, Reason: ReasonScaleDown},
		},
		{
			name: "young pod does not block scale up",
			in:   StepInput{Current: 4, Load: 0.9, PodCreationTimes: young, Now: now},
			want: StepDecision{Desired: 7, Reason: ReasonScaleUp},
		},
		{
			name: "scaled within interval holds",
			in:   StepInput{Current: 7, Load: 0.9, PodCreationTimes: old, Now: now, LastScaleTime: now.Add(-4 * time.Minute)},
			want: StepDecision{Desired: 7, Reason: ReasonInterval},
		},
		{
			name: "scaled exactly interval ago steps again",
			in:   StepInput{Current: 7, Load: 0.9, PodCreationTimes: old, Now: now, LastScaleTime: now.Add(-5 * time.Minute)},
			want: StepDecision{Desired: 10, Reason: ReasonScaleUp},
		},
		{
			name: "within interval still clamps to range",
			in:   StepInput{Current: 30, Load: 0.9, Now: now, LastScaleTime: now.Add(-time.Minute)},
			want: StepDecision{Desired: 20, Reason: ReasonClampedToRange},
		},
		{
			name: "negative current is treated as zero",
			in:   StepInput{Current: -1, Load: 0.9, Now: now},
			want: StepDecision{Desired: 3, Reason: ReasonScaleUp},
		},
		{
			name:   "huge step saturates instead of overflowing",
			params: StepParams{ScaleUpAbove: 0.8, ScaleDownBelow: 0.5, StepUp: 1<<31 - 1, StepDown: 1, MaxReplicas: 1<<31 - 1, Interval: time.Minute},
			in:     StepInput{Current: 10, Load: 0.9, Now: now},
			want:   StepDecision{Desired: 1<<31 - 1, Reason: ReasonScaleUp},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.params
			if p == (StepParams{}) {
				p = gpu
			}
			got := Step(p, tc.in)
			if got != tc.want {
				t.Errorf("Step() = %+v, want %+v", got, tc.want)
			}
			if got.Desired < p.MinReplicas || got.Desired > p.MaxReplicas {
				t.Errorf("Step() = %d outside [%d, %d]", got.Desired, p.MinReplicas, p.MaxReplicas)
			}
		})
	}
}

func withMinMax(p StepParams, lo, hi int32) StepParams {
	p.MinReplicas, p.MaxReplicas = lo, hi
	return p
}

// TestStepOneStepPerInterval walks a load that stays high through HPA syncs
// every 15s: the count grows by stepUp once per interval, not once per sync.
func TestStepOneStepPerInterval(t *testing.T) {
	p := StepParams{ScaleUpAbove: 0.8, ScaleDownBelow: 0.5, StepUp: 3, StepDown: 1, MaxReplicas: 20, MinPodAge: 10 * time.Minute, Interval: 5 * time.Minute}
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	current := int32(0)
	var lastScale time.Time
	for now := start; now.Before(start.Add(20 * time.Minute)); now = now.Add(15 * time.Second) {
		d := Step(p, StepInput{Current: current, Load: 0.9, Now: now, LastScaleTime: lastScale})
		if d.Desired != current {
			current, lastScale = d.Desired, now
		}
	}
	// Steps at 0, 5, 10 and 15 minutes.
	if current != 12 {
		t.Errorf("after 20 minutes of high load current = %d, want 12", current)
	}
}
