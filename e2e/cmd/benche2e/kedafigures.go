package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// The keda scenario's checks and arithmetic, as plain functions so they
// have unit tests; keda.go, kedaside.go and kedastack.go do the I/O.

// kedaOptions are the keda scenario's knobs.
type kedaOptions struct {
	ScaledObjects int           // ScaledObjects on the KEDA side, HPAs on the APIService side
	Rounds        int           // load changes per side
	Polling       time.Duration // the ScaledObjects' pollingInterval
	Steady        time.Duration // the window latency and CPU are read over
	Sides         []string      // sideAPIService and/or sideKEDA, in that order
	BinDir        string
}

const (
	sideAPIService = "apiservice"
	sideKEDA       = "keda"
	// hpaSync is kube-controller-manager's default HPA sync period, which
	// the plane keeps: the one KEDA's users run with.
	hpaSync = 15 * time.Second
	// maxScaledObjects bounds --scaled-objects: each Deployment may hold
	// two kwok pods, and a 2-core plane is the target machine.
	maxScaledObjects = 5000
)

// parseSides reads --keda-sides. The APIService side always runs first,
// whatever the order given: once KEDA's operator has started it cannot be
// taken out of the plane altogether (its CRDs, its watches), and the
// APIService side should run on a plane KEDA never touched.
func parseSides(s string) ([]string, error) {
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f != sideAPIService && f != sideKEDA {
			return nil, fmt.Errorf("--keda-sides: want %s and/or %s, comma-separated, got %q", sideAPIService, sideKEDA, f)
		}
		seen[f] = true
	}
	var out []string
	for _, side := range []string{sideAPIService, sideKEDA} {
		if seen[side] {
			out = append(out, side)
		}
	}
	return out, nil
}

// check reports every bad knob at once, before anything starts.
func (o kedaOptions) check() error {
	var errs []error
	if o.ScaledObjects < 1 || o.ScaledObjects > maxScaledObjects {
		errs = append(errs, fmt.Errorf("--scaled-objects must be within [1, %d], got %d", maxScaledObjects, o.ScaledObjects))
	}
	if o.Rounds < 1 {
		errs = append(errs, fmt.Errorf("--keda-rounds must be at least 1, got %d", o.Rounds))
	}
	// A ScaledObject's pollingInterval is whole seconds.
	if o.Polling < time.Second || o.Polling%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--keda-polling-interval must be a whole number of seconds, at least 1s, got %s", o.Polling))
	}
	if o.Steady < hpaSync {
		errs = append(errs, fmt.Errorf("--keda-steady must cover at least one HPA sync (%s), got %s", hpaSync, o.Steady))
	}
	if len(o.Sides) == 0 {
		errs = append(errs, fmt.Errorf("--keda-sides names no side"))
	}
	return errors.Join(errs...)
}

// nodesFor is the kwok nodes for n Deployments of at most two pods each
// (110 pods a node, kept under 100), plus one spare.
func nodesFor(n int) int { return 2*n/100 + 1 }

// flagValue is the value of --name in args, the last one given winning as
// with pflag; it reads both --name=value and --name value.
func flagValue(args []string, name string) (string, bool) {
	val, found := "", false
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, name+"="):
			val, found = strings.TrimPrefix(a, name+"="), true
		case a == name && i+1 < len(args):
			val, found = args[i+1], true
		}
	}
	return val, found
}

// quantileFigure prints the q-quantile of bs in milliseconds. Within the
// lowest bucket, or past the highest finite one, interpolation says
// nothing, so it prints the bound: the generic API server's request
// histogram starts at 5 ms, which a fast adapter's median falls under.
func quantileFigure(q float64, bs []bucket) string {
	total := countOf(bs)
	if total == 0 {
		return "n/a"
	}
	s := slices.Clone(bs)
	sort.Slice(s, func(i, j int) bool { return s[i].le < s[j].le })
	rank := q * total
	if rank <= s[0].count && !math.IsInf(s[0].le, 1) {
		return fmt.Sprintf("≤ %g ms", s[0].le*1000)
	}
	if last := len(s) - 1; math.IsInf(s[last].le, 1) && last > 0 && rank > s[last-1].count {
		return fmt.Sprintf("> %g ms", s[last-1].le*1000)
	}
	return fmt.Sprintf("%.2f ms", quantile(q, s)*1000)
}

// roundStats are the times from one load change to each HPA's new desired
// replicas (or those of several rounds, pooled).
type roundStats struct {
	Load          float64
	Want          int32
	N             int
	P50, P99, Max time.Duration
}

func statsOf(load float64, want int32, ds []time.Duration) roundStats {
	r := roundStats{Load: load, Want: want, N: len(ds), P50: percentile(ds, .5), P99: percentile(ds, .99)}
	for _, d := range ds {
		r.Max = max(r.Max, d)
	}
	return r
}

// perCall divides each process's CPU above idle over a window (ms) by the
// calls charged to it; a process with nothing to charge is left out.
func perCall(usedMs, calls map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for name, ms := range usedMs {
		if c := calls[name]; c > 0 {
			out[name] = ms / c
		}
	}
	return out
}

// counterDelta is after - before for each key of after.
func counterDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

// Process names the keda scenario samples CPU of, beside the plane's own.
const (
	procAdapter      = "metrics-adapter"
	procKEDAOperator = "keda-operator"
	procKEDAAdapter  = "keda-adapter"
)

// Series the steady window reads.
const (
	getMetricsSeconds = "capscale_adapter_keda_request_duration_seconds"
	kedaRequests      = "capscale_adapter_keda_requests_total"
	// The generic API server times an external-metrics LIST from the
	// request's arrival, authentication and authorization included;
	// GetMetrics is timed around the gRPC handler alone. Each is what
	// capscale's own code on that path costs the caller.
	apiRequestSeconds = "apiserver_request_duration_seconds"
	// The HPA controller's own time to read one External metric: the whole
	// path behind the aggregator, the same measure on both sides.
	hpaMetricSeconds = "horizontal_pod_autoscaler_controller_metric_computation_duration_seconds"
)

// kedaScrape is one reading of everything the steady window compares.
type kedaScrape struct {
	At      time.Time
	Adapter metricFamilies // capscale's adapter
	KCM     metricFamilies // kube-controller-manager's; nil if it could not be read
	CPU     cpuTimes
}

// kedaSide is one side's figures.
type kedaSide struct {
	Name   string
	Window time.Duration
	// Calls are the steady window's calls at capscale: GetMetrics on the
	// KEDA side, external-metrics LISTs on the APIService side.
	Calls    float64
	P50, P99 string // at capscale (quantileFigure)
	// HPAReads are the HPA controller's External metric reads.
	HPAReads       float64
	HPAP50, HPAP99 string
	// CPU is ms above idle per call: capscale's adapter and keda-operator
	// per call at capscale, the rest per HPA read.
	CPU map[string]float64
	// Others counts the scaler's other methods (KEDA side).
	Others map[string]float64
	Rounds []roundStats
	All    roundStats
}

// steadyFigures reads one side's steady window from the scrapes at its two
// ends, idle being each process's CPU rate before the side's objects existed.
func steadyFigures(side string, before, after kedaScrape, idle map[string]float64) kedaSide {
	name, want := apiRequestSeconds, map[string]string{"group": "external.metrics.k8s.io", "verb": "LIST"}
	if side == sideKEDA {
		name, want = getMetricsSeconds, map[string]string{"method": "GetMetrics"}
	}
	lat := bucketDelta(before.Adapter.histogramBuckets(name, want), after.Adapter.histogramBuckets(name, want))
	ks := kedaSide{Name: side, Window: after.At.Sub(before.At), Calls: countOf(lat),
		P50: quantileFigure(.5, lat), P99: quantileFigure(.99, lat), HPAP50: "n/a", HPAP99: "n/a"}
	if before.KCM != nil && after.KCM != nil {
		want := map[string]string{"metric_type": "External"}
		h := bucketDelta(before.KCM.histogramBuckets(hpaMetricSeconds, want), after.KCM.histogramBuckets(hpaMetricSeconds, want))
		ks.HPAReads, ks.HPAP50, ks.HPAP99 = countOf(h), quantileFigure(.5, h), quantileFigure(.99, h)
	}
	if side == sideKEDA {
		ks.Others = counterDelta(before.Adapter.counters(kedaRequests, "method"), after.Adapter.counters(kedaRequests, "method"))
		delete(ks.Others, "GetMetrics")
	}
	// One "pod" makes cpuMsPerPod the window's whole CPU above idle.
	used := cpuMsPerPod(before.CPU, after.CPU, ks.Window, idle, 1)
	ks.CPU = perCall(used, map[string]float64{
		procAdapter: ks.Calls, procKEDAOperator: ks.Calls,
		procKEDAAdapter: ks.HPAReads, "kube-apiserver": ks.HPAReads, "kube-controller-manager": ks.HPAReads,
	})
	return ks
}
