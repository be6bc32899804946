package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// Scheduling throughput, measured so that it holds on a shared machine
// (issue 17): every batch starts on a quiet plane (all nodes usable, the
// previous batch's pods Ready, the processes back at their idle CPU rate);
// one warm-up batch per side is not counted; sides alternate round by
// round; each batch's CPU per pod is read from /proc and the idle rate
// taken off; kube-scheduler's and the extender's latencies come from their
// /metrics.

// rigOptions are the throughput and tax scenarios' knobs.
type rigOptions struct {
	Mode      string // extender, native, plugin (throughput), tax or plugin-tax
	Nodes     int
	Batch     int // pods per batch
	Rounds    int // measured rounds per side
	ClientQPS int
	BinDir    string
	JSONFile  string
	PprofDir  string        // if set: CPU profiles of kube-scheduler and the extender during each side's first measured batch
	NodeLease time.Duration // the kwok nodes' Lease duration (plane.Options.NodeLeaseDuration)
	// ExtenderHTTPS serves the extender over TLS (stack.Options.ExtenderHTTPS).
	ExtenderHTTPS bool
	// ExtenderFloor runs the null extender instead ("bind" or "filter";
	// checkFloor).
	ExtenderFloor string
	// BudgetChanges is, in dra mode, how many budget changes each of
	// budgetCost's rounds makes a side (0 skips them).
	BudgetChanges int
}

// side is one arm of the comparison.
type side struct {
	Name      string
	Resource  corev1.ResourceName // "" for a pod that requests nothing extended
	Scheduler string              // the pods' schedulerName; "" is default-scheduler
	Config    string              // scheduler configuration (tax scenarios only)
	Binary    string              // scheduler binary (plugin-tax only; "" keeps the plane's)
}

// tax reports whether mode compares two schedulers on pods that request no
// underlay IP, restarting kube-scheduler between sides.
func tax(mode string) bool { return mode == "tax" || mode == "plugin-tax" }

// throughputSides names the two sides a throughput mode alternates;
// planeConfig is the plane's scheduler configuration (the tax modes' first
// side).
func throughputSides(mode, planeConfig, binDir string, clientQPS int) [2]side {
	switch mode {
	case "extender":
		// Both sides on the profile that scores every node, so the extender
		// is the only difference.
		return [2]side{{Name: "extender", Resource: names.UnderlayIPResource, Scheduler: exactProfile}, {Name: "native", Resource: nativeResource, Scheduler: exactProfile}}
	case "native", "native-prioritize":
		return [2]side{{Name: "native-mode", Resource: names.UnderlayIPResource}, {Name: "native", Resource: nativeResource}}
	case "dra", "dra-unscored":
		// The stock kube-scheduler, one profile that scores both resources
		// alike, or neither (draSchedulerConfig): where the count comes
		// from, devices or Node status, is the only difference.
		return [2]side{{Name: "dra", Resource: names.UnderlayIPResource}, {Name: "native", Resource: nativeResource}}
	case "plugin":
		// One capscale-scheduler, one profile: the plugin is the only
		// difference (it skips the other side's pods in PreFilter and PreScore).
		return [2]side{{Name: "plugin", Resource: names.UnderlayIPResource, Scheduler: exactProfile}, {Name: "native", Resource: nativeResource, Scheduler: exactProfile}}
	case "plugin-floor":
		// One binary, one resource: the null plugin is the only difference.
		return [2]side{{Name: "null-plugin", Resource: nativeResource, Scheduler: nullProfile}, {Name: "native", Resource: nativeResource, Scheduler: exactProfile}}
	case "plugin-null":
		// One more plugin on each side: UnderlayIP's work against none.
		return [2]side{{Name: "plugin", Resource: names.UnderlayIPResource, Scheduler: exactProfile}, {Name: "null-plugin", Resource: nativeResource, Scheduler: nullProfile}}
	case "plugin-memo":
		// One binary, one resource, the same rule: the memo is the only
		// difference.
		return [2]side{{Name: "memo", Resource: names.UnderlayIPResource, Scheduler: exactProfile}, {Name: "direct", Resource: names.UnderlayIPResource, Scheduler: directProfile}}
	case "tax", "plugin-tax":
		// The same client limits on both sides: only the scheduling
		// configuration differs.
		plain := defaultSchedulerConfig
		if clientQPS != 0 {
			plain += fmt.Sprintf("clientConnection:\n  qps: %d\n  burst: %d\n", clientQPS, 2*clientQPS)
		}
		sides := [2]side{{Name: "capscale-config", Config: planeConfig}, {Name: "default-config", Config: plain}}
		if mode == "plugin-tax" {
			// The binary and its configuration are the difference: the
			// plugin's PreFilter skips these pods, which is the cost measured.
			sides[0].Name, sides[0].Binary = "capscale-scheduler", filepath.Join(binDir, "capscale-scheduler")
			sides[1].Name, sides[1].Binary = "kube-scheduler", filepath.Join(binDir, "kube-scheduler")
		}
		return sides
	}
	return [2]side{}
}

// fits checks that every batch, the warm-up's included, finds room: each
// node offers 10 of each resource, and sides that request the same resource
// share it (plugin-floor's two sides both request nativeResource).
func fits(sides [2]side, rounds, batch, nodes int) error {
	pods := map[corev1.ResourceName]int{}
	for _, sd := range sides {
		if sd.Resource != "" {
			pods[sd.Resource] += (rounds + 1) * batch
		}
	}
	for _, sd := range sides {
		if n := pods[sd.Resource]; n > nodes*10 {
			return fmt.Errorf("(rounds+1)*batch over the sides that request %s = %d pods do not fit %d nodes of 10: lower --rounds or --batch", sd.Resource, n, nodes)
		}
	}
	return nil
}

// batchResult is one measured batch.
type batchResult struct {
	Side       string
	Round      int
	PodsPerS   float64
	CPUMsPod   map[string]float64
	AttemptP50 float64 // ms, scheduler_scheduling_attempt_duration_seconds
	AttemptP99 float64
	SLIP50     float64 // ms, scheduler_pod_scheduling_sli_duration_seconds
	SLIP99     float64
	Extender   map[string]float64 // p50 ms per route
	Requests   map[string]float64 // apiserver requests per pod by verb/resource/subresource
	Traffic    map[string]float64 // API writes, bodies and watch events per pod (traffic.flat, perUnit)
	Runtime    map[string]float64 // kube-scheduler's Go runtime per pod (runtimePerPod)
	QuietWait  time.Duration
	Quiet      bool
}

// sideReport is one side's figures in the --json file.
type sideReport struct {
	RoundsPodsPerS   []float64          `json:"rounds_pods_per_s"`
	MedianPodsPerS   float64            `json:"median_pods_per_s"`
	MinPodsPerS      float64            `json:"min_pods_per_s"`
	MaxPodsPerS      float64            `json:"max_pods_per_s"`
	CPUMsPerPod      map[string]float64 `json:"cpu_ms_per_pod"`
	CPUMsPerPodTotal float64            `json:"cpu_ms_per_pod_total"`
	AttemptP50Ms     float64            `json:"scheduling_attempt_p50_ms"`
	AttemptP99Ms     float64            `json:"scheduling_attempt_p99_ms"`
	SLIP50Ms         float64            `json:"pod_scheduling_sli_p50_ms"`
	SLIP99Ms         float64            `json:"pod_scheduling_sli_p99_ms"`
	ExtenderP50Ms    map[string]float64 `json:"extender_p50_ms,omitempty"`
	RequestsPerPod   map[string]float64 `json:"apiserver_requests_per_pod"`
	// TrafficPerPod is the API writes, their bodies' bytes and the watch
	// events sent per pod (apitraffic.go), the medians of the rounds.
	TrafficPerPod map[string]float64 `json:"api_traffic_per_pod"`
	// RuntimePerPod is kube-scheduler's allocation and garbage collection
	// per pod, the medians of the rounds (runtimePerPod).
	RuntimePerPod map[string]float64 `json:"kube_scheduler_runtime_per_pod,omitempty"`
	// CPUMsPerPodCI95 is each process's median CPU per pod with its 95%
	// distribution-free interval over the rounds.
	CPUMsPerPodCI95 map[string]interval `json:"cpu_ms_per_pod_ci95"`
}

// rigReport is the --json file.
type rigReport struct {
	Scenario          string                `json:"scenario"`
	Nodes             int                   `json:"nodes"`
	ExtenderHTTPS     bool                  `json:"extender_https"`
	ExtenderFloor     string                `json:"extender_floor,omitempty"`
	BatchPods         int                   `json:"batch_pods"`
	Rounds            int                   `json:"rounds"`
	Date              string                `json:"date"`
	LoadAverage       string                `json:"load_average_at_start"`
	IdleCPUPerS       map[string]float64    `json:"idle_cpu_ms_per_s"`
	Sides             map[string]sideReport `json:"sides"`
	RatioOfMedians    float64               `json:"ratio_of_medians"`
	PairedRatioMin    float64               `json:"paired_ratio_min"`
	PairedRatioMax    float64               `json:"paired_ratio_max"`
	CPURatioOfMedians float64               `json:"cpu_per_pod_ratio_of_medians"`
	// The median of the paired rounds' ratios with its 95% interval: the
	// rate, the total CPU per pod, and kube-scheduler's own CPU per pod.
	PairedRateCI95     interval `json:"paired_rate_ratio_ci95"`
	PairedCPUCI95      interval `json:"paired_cpu_per_pod_ratio_ci95"`
	PairedSchedCPUCI95 interval `json:"paired_kube_scheduler_cpu_per_pod_ratio_ci95"`
	// Budget is dra mode's budget-change cost (budgetCost).
	Budget *budgetReport `json:"budget_change,omitempty"`
}

// defaultSchedulerConfig is kube-scheduler's own defaults, for the tax
// scenario's other side.
const defaultSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
`

func throughput(ctx context.Context, o rigOptions) error {
	if o.Rounds < 1 || o.Batch < 1 {
		return fmt.Errorf("--rounds and --batch must be at least 1")
	}
	if err := fits(throughputSides(o.Mode, "", o.BinDir, o.ClientQPS), o.Rounds, o.Batch, o.Nodes); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Hour)
	defer cancel()
	started := time.Now()
	load := loadAverage()
	var extBin string
	if o.ExtenderFloor != "" {
		extBin = filepath.Join(o.BinDir, "nullextender")
		if _, err := os.Stat(extBin); err != nil {
			return fmt.Errorf("the null extender is missing (make bench-e2e builds it): %w", err)
		}
	}
	schedCfg, extArgs, err := schedulerConfig(o.ClientQPS, o.Mode, o.ExtenderFloor == "filter")
	if err != nil {
		return err
	}
	if schedCfg != stack.DeployFile("scheduler/kube-scheduler-config.yaml") && schedCfg != stack.DeployFile("native/kube-scheduler-config.yaml") &&
		schedCfg != stack.DeployFile("plugin/kube-scheduler-config.yaml") {
		defer os.Remove(schedCfg)
	}
	native := o.Mode == "native" || o.Mode == "native-prioritize"
	dra := draMode(o.Mode)
	plugin := pluginMode(o.Mode)
	var schedBin string
	if nullPlugin(o.Mode) {
		schedBin = filepath.Join(o.BinDir, "capscale-scheduler-null")
		if _, err := os.Stat(schedBin); err != nil {
			return fmt.Errorf("the null plugin's scheduler is missing (make bench-e2e builds it): %w", err)
		}
	}
	var schedFlags []string
	if o.PprofDir != "" {
		extArgs = append(extArgs, "--profiling")
		schedFlags = []string{"--profiling=true"}
	}
	var kcmFlags []string
	if o.ClientQPS != 0 {
		// kube-controller-manager too: at its default 20 QPS, removing the
		// not-ready taint of 5000 new nodes alone takes minutes (kwokctl
		// lifts the same limit for large clusters).
		kcmFlags = []string{fmt.Sprintf("--kube-api-qps=%d", o.ClientQPS), fmt.Sprintf("--kube-api-burst=%d", 2*o.ClientQPS)}
	}
	ten := resource.MustParse("10")
	s, err := stack.Start(ctx, stack.Options{
		SchedulerConfigFile: schedCfg,
		ExtenderArgs:        extArgs,
		ExtenderBinary:      extBin,
		BinDir:              o.BinDir,
		Plane: plane.Options{
			BinDir: o.BinDir, Nodes: o.Nodes,
			Node: func(_ int, n *corev1.Node) {
				n.Status.Capacity[nativeResource] = ten
				n.Status.Allocatable[nativeResource] = ten
			},
			Logf:                        func(f string, a ...any) { fmt.Printf("# "+f+"\n", a...) },
			ExtraSchedulerFlags:         schedFlags,
			ExtraControllerManagerFlags: kcmFlags,
			NodeLeaseDuration:           o.NodeLease,
		},
		Extender:        !plugin,
		ExtenderHTTPS:   o.ExtenderHTTPS,
		Native:          native,
		DRA:             dra,
		Plugin:          plugin,
		SchedulerBinary: schedBin,
	})
	if err != nil {
		return err
	}
	defer s.Stop()
	fmt.Printf("# %s scenario: %d nodes (Leases of %s), plane up in %.1fs; client QPS %s; extender over %s; load average %s\n", o.Mode, o.Nodes, s.Plane.Opts.NodeLeaseDuration, time.Since(started).Seconds(), qpsLabel(o.ClientQPS), map[bool]string{false: "HTTP", true: "HTTPS"}[o.ExtenderHTTPS], load)

	if o.ExtenderFloor != "" {
		fmt.Printf("# the extender is the null extender (--extender-floor=%s): the protocol's floor; it counts no IPs\n", o.ExtenderFloor)
	}

	sides := throughputSides(o.Mode, s.Plane.Opts.SchedulerConfig, o.BinDir, o.ClientQPS)

	const ns = "bench"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		return err
	}
	if err := waitNodesUsable(ctx, s.Client, o.Nodes, native); err != nil {
		return err
	}
	if dra {
		if err := waitDevicesPublished(ctx, s.Client, o.Nodes, 10); err != nil {
			return err
		}
	}
	// The bench's own client must never be what limits the rate.
	benchCfg := rest.CopyConfig(s.Config)
	benchCfg.QPS, benchCfg.Burst = 2000, 4000
	bench, err := kubernetes.NewForConfig(benchCfg)
	if err != nil {
		return err
	}
	adminHTTP, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		return err
	}
	extHTTP, err := s.ExtenderHTTPClient()
	if err != nil {
		return err
	}
	w := newBindWatcher(ctx, s.Client, ns)

	// Idle: what every process burns with nothing to schedule.
	time.Sleep(5 * time.Second)
	pids := livePids(s.Plane)
	idleAPI, err := scrapeAPIServer(ctx, s.Client)
	if err != nil {
		return err
	}
	a, err := sampleCPU(pids)
	if err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(10 * time.Second)
	b, err := sampleCPU(pids)
	if err != nil {
		return err
	}
	idleWall := time.Since(t0)
	idle := idleRates(a, b, idleWall)
	fmt.Printf("# idle CPU (ms per s): %s\n", formatMap(idle, 1000))
	idleAPIAfter, err := scrapeAPIServer(ctx, s.Client)
	if err != nil {
		return err
	}
	idleTraffic := perUnit(apiTraffic(idleAPI, idleAPIAfter).flat(), nil, 0, 1)
	for k, v := range idleTraffic {
		idleTraffic[k] = v / idleWall.Seconds()
	}

	var budgetLines []row
	var budget *budgetReport
	r := &rig{s: s, bench: bench, adminHTTP: adminHTTP, extHTTP: extHTTP, w: w, ns: ns, idle: idle, idleTraffic: idleTraffic, batch: o.Batch, pprofDir: o.PprofDir, lastRound: o.Rounds - 1}
	if dra && o.BudgetChanges > 0 {
		// Before the rounds, on a plane that holds no claim yet: its rows
		// are printed at once, and again with the rounds'.
		b, err := r.budgetCost(ctx, o.BudgetChanges, o.Nodes)
		if err != nil {
			return err
		}
		budget, budgetLines = &b, budgetRows(b)
		printRows(budgetLines, thisRun(started, load))
	}
	current := sides[0].Name
	var results []batchResult
	fmt.Printf("round\tside\tpods/s\tcpu ms/pod (sched ext api etcd kwok kcm)\tattempt p50/p99 ms\tsli p50/p99 ms\tquiet wait\n")
	for round := -1; round < o.Rounds; round++ {
		for _, sd := range sidesOfRound(round+1, sides[0].Name, sides[1].Name) {
			side := sides[0]
			if sd == sides[1].Name {
				side = sides[1]
			}
			if tax(o.Mode) && side.Name != current {
				if err := s.Plane.RestartSchedulerWith(ctx, side.Binary, side.Config); err != nil {
					return err
				}
				current = side.Name
				r.idle = idle
			}
			res, err := r.measure(ctx, side, round)
			if err != nil {
				return err
			}
			label := fmt.Sprint(round)
			if round < 0 {
				label = "warm-up"
			} else {
				results = append(results, res)
			}
			fmt.Printf("%s\t%s\t%.1f\t%.2f (%s)\t%.1f/%.1f\t%.0f/%.0f\t%.1fs%s\n", label, res.Side, res.PodsPerS,
				total(res.CPUMsPod), formatCPU(res.CPUMsPod), res.AttemptP50, res.AttemptP99, res.SLIP50, res.SLIP99,
				res.QuietWait.Seconds(), map[bool]string{true: "", false: " (not quiet)"}[res.Quiet])
		}
	}
	rep := report(o, load, idle, sides, results)
	rep.Budget = budget
	printReport(rep, sides)
	printRows(append(throughputRows(rep, sides[0].Name, sides[1].Name), budgetLines...), thisRun(started, load))
	if o.JSONFile != "" {
		out, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.JSONFile, append(out, '\n'), 0o644); err != nil {
			return err
		}
	}
	if tax(o.Mode) {
		return nil
	}
	if o.ExtenderFloor != "" {
		fmt.Println("# capacity not checked: the null extender counts no IPs")
		return nil
	}
	return checkCapacity(ctx, s.Client, ns)
}

// rig holds what every batch needs.
type rig struct {
	s                  *stack.Stack
	bench              kubernetes.Interface
	adminHTTP, extHTTP *http.Client
	w                  *bindWatcher
	ns                 string
	idle               map[string]float64
	idleTraffic        map[string]float64 // API traffic per wall second when idle (traffic.flat's keys)
	batch              int
	pprofDir           string
	lastRound          int
}

// scrapes is everything read before and after a batch.
type scrapes struct {
	cpu                     cpuTimes
	sched, extender, apiSrv metricFamilies
}

func (r *rig) scrape(ctx context.Context, pids map[string]int) (scrapes, error) {
	var sc scrapes
	var err error
	if sc.sched, err = scrapeHTTP(ctx, r.adminHTTP, r.s.SchedulerURL+"/metrics"); err != nil {
		return sc, fmt.Errorf("kube-scheduler metrics: %w", err)
	}
	if r.s.ExtenderURL != "" { // plugin mode runs none
		if sc.extender, err = scrapeHTTP(ctx, r.extHTTP, r.s.ExtenderURL+"/metrics"); err != nil {
			return sc, fmt.Errorf("extender metrics: %w", err)
		}
	}
	if sc.apiSrv, err = scrapeAPIServer(ctx, r.s.Client); err != nil {
		return sc, fmt.Errorf("kube-apiserver metrics: %w", err)
	}
	sc.cpu, err = sampleCPU(pids)
	return sc, err
}

// measure runs one batch on a quiet plane and waits until the plane is
// quiet again, so the batch is charged everything it caused.
func (r *rig) measure(ctx context.Context, sd side, round int) (batchResult, error) {
	pids := livePids(r.s.Plane)
	waited, quiet, err := waitQuiet(ctx, pids, r.idle, 90*time.Second)
	if err != nil {
		return batchResult{}, err
	}
	before, err := r.scrape(ctx, pids)
	if err != nil {
		return batchResult{}, err
	}
	prefix := fmt.Sprintf("%s-%d", sd.Name, round+1)
	if r.pprofDir != "" && (round == 0 || round == r.lastRound) {
		// The first and the last measured batch of each side (a cost that
		// grows with the pods bound shows between them): long enough to
		// cover the scheduling, short enough to end before the next batch.
		name := sd.Name
		if round != 0 {
			name += "-last"
		}
		defer r.profile(r.pprofDir, name, 8)()
	}
	start := time.Now()
	if err := createBatch(ctx, r.bench, r.ns, prefix, sd.Resource, sd.Scheduler, r.batch); err != nil {
		return batchResult{}, err
	}
	last, err := r.w.waitBound(ctx, prefix, r.batch, 10*time.Minute)
	if err != nil {
		return batchResult{}, fmt.Errorf("%w; %s", err, whyUnbound(ctx, r.s.Plane, r.ns, prefix))
	}
	if err := r.w.waitReady(ctx, prefix, r.batch, 10*time.Minute); err != nil {
		return batchResult{}, err
	}
	if _, _, err := waitQuiet(ctx, pids, r.idle, 90*time.Second); err != nil {
		return batchResult{}, err
	}
	after, err := r.scrape(ctx, pids)
	if err != nil {
		return batchResult{}, err
	}
	wall := time.Since(start)
	res := batchResult{
		Side: sd.Name, Round: round, PodsPerS: float64(r.batch) / last.Sub(start).Seconds(),
		CPUMsPod: cpuMsPerPod(before.cpu, after.cpu, wall, r.idle, r.batch),
		Extender: map[string]float64{}, Requests: map[string]float64{},
		QuietWait: waited, Quiet: quiet,
	}
	att := bucketDelta(before.sched.histogramBuckets("scheduler_scheduling_attempt_duration_seconds", nil), after.sched.histogramBuckets("scheduler_scheduling_attempt_duration_seconds", nil))
	res.AttemptP50, res.AttemptP99 = 1000*quantile(0.5, att), 1000*quantile(0.99, att)
	sli := bucketDelta(before.sched.histogramBuckets("scheduler_pod_scheduling_sli_duration_seconds", nil), after.sched.histogramBuckets("scheduler_pod_scheduling_sli_duration_seconds", nil))
	res.SLIP50, res.SLIP99 = 1000*quantile(0.5, sli), 1000*quantile(0.99, sli)
	for _, route := range []string{"filter", "prioritize", "bind"} {
		want := map[string]string{"route": route}
		d := bucketDelta(before.extender.histogramBuckets("capscale_extender_http_request_duration_seconds", want), after.extender.histogramBuckets("capscale_extender_http_request_duration_seconds", want))
		if n := countOf(d); n > 0 {
			res.Extender[route] = 1000 * quantile(0.5, d)
			res.Extender[route+" calls/pod"] = n / float64(r.batch)
		}
	}
	// New connections per pod: what kube-scheduler's client (at most 2
	// idle connections) makes the extender accept.
	if c, ok := after.extender.counters("capscale_extender_http_connections_total")[""]; ok && r.batch > 0 {
		res.Extender["connections/pod"] = (c - before.extender.counters("capscale_extender_http_connections_total")[""]) / float64(r.batch)
	}
	res.Runtime = runtimePerPod(before.sched, after.sched, r.batch)
	res.Traffic = perUnit(apiTraffic(before.apiSrv, after.apiSrv).flat(), r.idleTraffic, wall, r.batch)
	bReq := before.apiSrv.counters("apiserver_request_total", "verb", "resource", "subresource")
	for k, v := range after.apiSrv.counters("apiserver_request_total", "verb", "resource", "subresource") {
		if d := (v - bReq[k]) / float64(r.batch); d >= 0.05 {
			res.Requests[k] = d
		}
	}
	return res, nil
}

// profile records CPU profiles of kube-scheduler and the extender for
// seconds, in the background, into dir/<process>-<side>.pprof. The returned
// function waits for both.
func (r *rig) profile(dir, side string, seconds int) func() {
	var wg sync.WaitGroup
	for name, c := range map[string]struct {
		client *http.Client
		url    string
	}{
		"kube-scheduler": {r.adminHTTP, r.s.SchedulerURL},
		"extender":       {r.extHTTP, r.s.ExtenderURL},
	} {
		if c.url == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The profile takes seconds to come: no client timeout.
			hc := *c.client
			hc.Timeout = 0
			resp, err := hc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", c.url, seconds))
			if err == nil {
				defer resp.Body.Close()
				var b []byte
				if b, err = io.ReadAll(resp.Body); err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s: %s", resp.Status, b)
				}
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, name+"-"+side+".pprof"), b, 0o644)
				}
			}
			if err != nil {
				fmt.Printf("# profile %s during %s: %v\n", name, side, err)
			}
		}()
	}
	return wg.Wait
}

// countOf is the number of observations in cumulative buckets.
func countOf(bs []bucket) float64 {
	m := 0.0
	for _, b := range bs {
		m = max(m, b.count)
	}
	return m
}

// exactProfile is the scheduler profile of deploy/scheduler that scores
// every node for underlay pods.
const exactProfile = "capscale-scheduler"

// createBatch creates n pods for scheduler, each requesting one res (none
// if res is "").
func createBatch(ctx context.Context, cs kubernetes.Interface, ns, prefix string, res corev1.ResourceName, scheduler string, n int) error {
	one := resource.MustParse("1")
	err := forEach(ctx, n, 32, nil, func(ctx context.Context, i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%04d", prefix, i), Namespace: ns, Labels: map[string]string{"batch": prefix}},
			Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/bench:1",
			}}},
		}
		if res != "" {
			pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{res: one}, Limits: corev1.ResourceList{res: one}}
		}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating pods: %w", err)
	}
	return nil
}

// whyUnbound says why a batch did not bind: the scheduler's own reason on
// one of its pods that waits, or the components that have exited.
func whyUnbound(ctx context.Context, p *plane.Plane, ns, batch string) string {
	var exited []string
	for _, proc := range p.Processes() {
		if done, err := proc.Exited(); done {
			exited = append(exited, fmt.Sprintf("%s exited (%v)", proc.Name, err))
		}
	}
	reason := "no pod of the batch was listed"
	pods, err := p.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch=" + batch})
	if err != nil {
		return strings.Join(append(exited, fmt.Sprintf("listing its pods: %v", err)), "; ")
	}
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != "" {
			continue
		}
		reason = fmt.Sprintf("pod %s has no PodScheduled condition: the scheduler has not tried it", pod.Name)
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				reason = fmt.Sprintf("pod %s: %s: %s", pod.Name, c.Reason, c.Message)
			}
		}
		break
	}
	return strings.Join(append(exited, reason), "; ")
}

// waitNodesUsable returns once all n nodes are Ready and untainted and, in
// native mode, publish their underlay-IP capacity.
func waitNodesUsable(ctx context.Context, cs kubernetes.Interface, n int, published bool) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err == nil {
			usable := 0
			for i := range list.Items {
				nd := &list.Items[i]
				if _, ok := nd.Status.Allocatable[names.UnderlayIPResource]; nodeUsable(nd) && (ok || !published) {
					usable++
				}
			}
			if usable == n {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d nodes usable after 10m", usable, n)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// report folds the measured rounds into the --json shape.
func report(o rigOptions, load string, idle map[string]float64, sides [2]side, results []batchResult) rigReport {
	rep := rigReport{
		Scenario: o.Mode, Nodes: o.Nodes, ExtenderHTTPS: o.ExtenderHTTPS, ExtenderFloor: o.ExtenderFloor, BatchPods: o.Batch, Rounds: o.Rounds,
		Date: time.Now().UTC().Format(time.RFC3339), LoadAverage: load,
		IdleCPUPerS: scale(idle, 1000), Sides: map[string]sideReport{},
	}
	rates := map[string][]float64{}
	cpuTotals := map[string][]float64{}
	schedCPU := map[string][]float64{}
	for _, sd := range sides {
		var mine []batchResult
		for _, r := range results {
			if r.Side == sd.Name {
				mine = append(mine, r)
			}
		}
		sr := sideReport{CPUMsPerPod: map[string]float64{}, CPUMsPerPodCI95: map[string]interval{}, ExtenderP50Ms: map[string]float64{}, RequestsPerPod: map[string]float64{}, RuntimePerPod: map[string]float64{}, TrafficPerPod: map[string]float64{}}
		perProc, perRoute, perReq, perRuntime, perTraffic := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		var att50, att99, sli50, sli99 []float64
		for _, r := range mine {
			sr.RoundsPodsPerS = append(sr.RoundsPodsPerS, r.PodsPerS)
			cpuTotals[sd.Name] = append(cpuTotals[sd.Name], total(r.CPUMsPod))
			for k, v := range r.CPUMsPod {
				perProc[k] = append(perProc[k], v)
			}
			for k, v := range r.Extender {
				perRoute[k] = append(perRoute[k], v)
			}
			for k, v := range r.Requests {
				perReq[k] = append(perReq[k], v)
			}
			for k, v := range r.Runtime {
				perRuntime[k] = append(perRuntime[k], v)
			}
			for k, v := range r.Traffic {
				perTraffic[k] = append(perTraffic[k], v)
			}
			att50, att99 = append(att50, r.AttemptP50), append(att99, r.AttemptP99)
			sli50, sli99 = append(sli50, r.SLIP50), append(sli99, r.SLIP99)
		}
		rates[sd.Name] = sr.RoundsPodsPerS
		sp := summarize(sr.RoundsPodsPerS)
		sr.MedianPodsPerS, sr.MinPodsPerS, sr.MaxPodsPerS = sp.Median, sp.Min, sp.Max
		for k, v := range perProc {
			sr.CPUMsPerPod[k] = summarize(v).Median
			sr.CPUMsPerPodCI95[k] = medianInterval(v, 0.95)
		}
		schedCPU[sd.Name] = perProc["kube-scheduler"]
		sr.CPUMsPerPodTotal = summarize(cpuTotals[sd.Name]).Median
		for k, v := range perRoute {
			sr.ExtenderP50Ms[k] = summarize(v).Median
		}
		for k, v := range perReq {
			sr.RequestsPerPod[k] = summarize(v).Median
		}
		for k, v := range perRuntime {
			sr.RuntimePerPod[k] = summarize(v).Median
		}
		for k, v := range perTraffic {
			// A key a round did not see counts 0 there.
			v = append(v, make([]float64, len(mine)-len(v))...)
			sr.TrafficPerPod[k] = summarize(v).Median
		}
		sr.AttemptP50Ms, sr.AttemptP99Ms = summarize(att50).Median, summarize(att99).Median
		sr.SLIP50Ms, sr.SLIP99Ms = summarize(sli50).Median, summarize(sli99).Median
		rep.Sides[sd.Name] = sr
	}
	a, b := sides[0].Name, sides[1].Name
	rep.RatioOfMedians = rep.Sides[a].MedianPodsPerS / rep.Sides[b].MedianPodsPerS
	pr := summarize(pairedRatios(rates[a], rates[b]))
	rep.PairedRatioMin, rep.PairedRatioMax = pr.Min, pr.Max
	rep.CPURatioOfMedians = rep.Sides[a].CPUMsPerPodTotal / rep.Sides[b].CPUMsPerPodTotal
	rep.PairedRateCI95 = medianInterval(pairedRatios(rates[a], rates[b]), 0.95)
	rep.PairedCPUCI95 = medianInterval(pairedRatios(cpuTotals[a], cpuTotals[b]), 0.95)
	rep.PairedSchedCPUCI95 = medianInterval(pairedRatios(schedCPU[a], schedCPU[b]), 0.95)
	return rep
}

func printReport(rep rigReport, sides [2]side) {
	for _, sd := range sides {
		sr := rep.Sides[sd.Name]
		fmt.Printf("%s: median %.1f pods/s (min %.1f, max %.1f over %d rounds); CPU %.2f ms/pod (%s); attempt p50/p99 %.1f/%.1f ms; sli p50/p99 %.0f/%.0f ms\n",
			sd.Name, sr.MedianPodsPerS, sr.MinPodsPerS, sr.MaxPodsPerS, len(sr.RoundsPodsPerS), sr.CPUMsPerPodTotal, formatCPU(sr.CPUMsPerPod),
			sr.AttemptP50Ms, sr.AttemptP99Ms, sr.SLIP50Ms, sr.SLIP99Ms)
		if len(sr.ExtenderP50Ms) > 0 {
			fmt.Printf("  extender (median of rounds): %s\n", formatMap(sr.ExtenderP50Ms, 1))
		}
		fmt.Printf("  apiserver requests per pod: %s\n", formatMap(sr.RequestsPerPod, 1))
		fmt.Printf("  API traffic per pod (median of rounds, idle taken off): %s\n", trafficFigure(sr.TrafficPerPod))
		if len(sr.RuntimePerPod) > 0 {
			fmt.Printf("  kube-scheduler's Go runtime per pod (median of rounds): %s\n", formatMap(sr.RuntimePerPod, 1))
		}
	}
	fmt.Printf("ratio of medians %s/%s: %.2f (paired rounds %.2f–%.2f); CPU per pod ratio %.2f\n",
		sides[0].Name, sides[1].Name, rep.RatioOfMedians, rep.PairedRatioMin, rep.PairedRatioMax, rep.CPURatioOfMedians)
	fmt.Printf("median of paired ratios [95%% interval]: rate %s; CPU per pod %s; kube-scheduler CPU per pod %s\n",
		rep.PairedRateCI95, rep.PairedCPUCI95, rep.PairedSchedCPUCI95)
	for _, sd := range sides {
		fmt.Printf("  %s CPU ms/pod [95%% interval]: kube-scheduler %s, extender %s\n", sd.Name,
			rep.Sides[sd.Name].CPUMsPerPodCI95["kube-scheduler"], rep.Sides[sd.Name].CPUMsPerPodCI95["extender"])
	}
}

// schedRuntime are the Go runtime counters of kube-scheduler's /metrics
// (client_golang's Go collector with every runtime metric, as component-base
// registers it) that runtimePerPod reports, with the unit each is shown in.
var schedRuntime = []struct {
	key, metric string
	scale       float64
}{
	{"alloc MB", "go_gc_heap_allocs_bytes_total", 1.0 / (1 << 20)},
	{"GC CPU ms", "go_cpu_classes_gc_total_cpu_seconds_total", 1000},
	{"GC cycles", "go_gc_cycles_total_gc_cycles_total", 1},
}

// runtimePerPod is how much kube-scheduler allocated and collected per pod
// of a batch: it tells a plugin's own CPU from the garbage collection that
// the framework's allocations for one more plugin cost. A counter the
// scheduler does not expose is left out.
func runtimePerPod(before, after metricFamilies, batch int) map[string]float64 {
	out := map[string]float64{}
	if batch <= 0 {
		return out
	}
	for _, m := range schedRuntime {
		b, okB := before.counters(m.metric)[""]
		a, okA := after.counters(m.metric)[""]
		if okA && okB && a >= b {
			out[m.key] = (a - b) * m.scale / float64(batch)
		}
	}
	return out
}

// formatCPU prints the measured processes in a fixed order.
func formatCPU(m map[string]float64) string {
	parts := make([]string, 0, len(measured))
	for _, name := range measured {
		if v, ok := m[name]; ok {
			parts = append(parts, fmt.Sprintf("%.2f", v))
		} else {
			parts = append(parts, "-")
		}
	}
	return strings.Join(parts, " ")
}

func formatMap(m map[string]float64, factor float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, m[k]*factor))
	}
	return strings.Join(parts, " ")
}

func scale(m map[string]float64, f float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = v * f
	}
	return out
}
