package main

import (
	"fmt"
	"math"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The scheduling rig's decisions, as plain functions over plain values so
// they have unit tests; the I/O that feeds them is in probe.go.

// spread is the median and range of one side's rounds.
type spread struct {
	Median, Min, Max float64
}

// checkNodeLease rejects a Lease duration kwok cannot take as given: it
// wants whole seconds, and 0 would quietly become the plane's default.
func checkNodeLease(d time.Duration) error {
	if d < time.Second || d%time.Second != 0 {
		return fmt.Errorf("--node-lease must be a whole number of seconds, at least 1s, got %s", d)
	}
	return nil
}

// summarize returns the median and range of xs (NaN for none).
func summarize(xs []float64) spread {
	if len(xs) == 0 {
		return spread{math.NaN(), math.NaN(), math.NaN()}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// pairedRatios divides round i of a by round i of b: the two ran next to
// each other, so their ratio is free of the machine's slow drift. The
// shorter side decides how many pairs there are.
func pairedRatios(a, b []float64) []float64 {
	n := min(len(a), len(b))
	out := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		if b[i] != 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// interval is a confidence interval for a median.
type interval struct {
	Median float64 `json:"median"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
	// Coverage is the interval's exact confidence (order statistics of a
	// Binomial(n, 1/2)); below the asked level when there are too few values.
	Coverage float64 `json:"coverage"`
}

func (i interval) String() string {
	if i.Coverage < 0.95 {
		return fmt.Sprintf("%.3f [%.3f–%.3f, covers only %.0f%%]", i.Median, i.Lo, i.Hi, 100*i.Coverage)
	}
	return fmt.Sprintf("%.3f [%.3f–%.3f]", i.Median, i.Lo, i.Hi)
}

// medianInterval is the distribution-free confidence interval for the median
// of xs: the k-th smallest and k-th largest values, with k the largest for
// which the interval still covers the median with probability conf. It
// assumes nothing of the rounds' distribution, only that they are
// independent; with fewer than 6 values no k reaches 95% and the interval is
// the whole range, its lower coverage said.
func medianInterval(xs []float64, conf float64) interval {
	n := len(xs)
	if n == 0 {
		return interval{math.NaN(), math.NaN(), math.NaN(), 0}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	// The interval [x(k), x(n-k+1)] misses the median with probability
	// 2·P(X ≤ k-1), X ~ Binomial(n, 1/2).
	term := math.Pow(0.5, float64(n)) // P(X = j)
	cdf := term                       // P(X ≤ j)
	k, coverage := 1, 1-2*cdf
	for j := 1; j <= (n-1)/2; j++ {
		term *= float64(n-j+1) / float64(j)
		cdf += term
		c := 1 - 2*cdf
		if c < conf {
			break
		}
		k, coverage = j+1, c
	}
	return interval{Median: summarize(s).Median, Lo: s[k-1], Hi: s[n-k], Coverage: coverage}
}

// sidesOfRound alternates which side goes first, round by round, so neither
// side always follows the other's leftovers.
func sidesOfRound(round int, a, b string) [2]string {
	if round%2 == 1 {
		return [2]string{b, a}
	}
	return [2]string{a, b}
}

// cpuTimes is each process's cumulative CPU time (user + system).
type cpuTimes map[string]time.Duration

// cpuMsPerPod charges each process's CPU over a batch, minus what it burns
// when the plane is idle (idle is CPU per wall second), to the batch's pods.
// A process that used less than its idle rate is charged 0: background noise,
// not work the pods saved.
func cpuMsPerPod(before, after cpuTimes, wall time.Duration, idle map[string]float64, pods int) map[string]float64 {
	out := map[string]float64{}
	if pods <= 0 {
		return out
	}
	for name, a := range after {
		b, ok := before[name]
		if !ok {
			continue
		}
		used := (a - b).Seconds() - idle[name]*wall.Seconds()
		out[name] = math.Max(0, used) * 1000 / float64(pods)
	}
	return out
}

// idleRates is CPU seconds per wall second of each process between two
// samples taken while nothing was scheduled.
func idleRates(before, after cpuTimes, wall time.Duration) map[string]float64 {
	out := map[string]float64{}
	if wall <= 0 {
		return out
	}
	for name, a := range after {
		if b, ok := before[name]; ok {
			out[name] = (a - b).Seconds() / wall.Seconds()
		}
	}
	return out
}

// quietEnough says whether a window's CPU rate (CPU seconds per wall
// second) is back to idle: at most half as much again as idle plus 2% of a
// core, so the previous batch's tail (kwok marking pods Ready, the
// apiserver's watch fan-out) no longer runs under the next batch.
func quietEnough(rate, idle float64) bool {
	return rate <= idle*1.5+0.02
}

// nodeUsable is a node a pod can land on now: Ready, and without the
// NoSchedule or NoExecute taints the node lifecycle controller puts on nodes
// that are not (yet) ready.
func nodeUsable(n *corev1.Node) bool {
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready || n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	return true
}

// podReady is a pod kwok has finished with: bound and Ready.
func podReady(p *corev1.Pod) bool {
	if p.Spec.NodeName == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// bucket is one cumulative histogram bucket: count of observations ≤ le.
type bucket struct {
	le    float64
	count float64
}

// quantile estimates the q-quantile from cumulative buckets the way
// Prometheus' histogram_quantile does: linear within the bucket that holds
// it, the upper bound of the last finite bucket when it falls in +Inf.
func quantile(q float64, bs []bucket) float64 {
	if len(bs) == 0 {
		return math.NaN()
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	total := bs[len(bs)-1].count
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	prevLe, prevCount := 0.0, 0.0
	for _, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return prevLe
			}
			if b.count == prevCount {
				return b.le
			}
			return prevLe + (b.le-prevLe)*(rank-prevCount)/(b.count-prevCount)
		}
		prevLe, prevCount = b.le, b.count
	}
	return prevLe
}

// bucketDelta subtracts an earlier scrape's buckets from a later one's, so
// the quantile covers only what happened in between.
func bucketDelta(before, after []bucket) []bucket {
	prev := map[float64]float64{}
	for _, b := range before {
		prev[b.le] = b.count
	}
	out := make([]bucket, 0, len(after))
	for _, b := range after {
		out = append(out, bucket{le: b.le, count: b.count - prev[b.le]})
	}
	return out
}
