// Command benche2e is `make bench-e2e`: it measures capscale inside a real
// control plane and prints figures; it asserts nothing about speed.
//
// Scheduling throughput (issue 17, throughput.go): one plane of N kwok
// nodes; pods alternate, round by round, between two sides on the same
// plane. --mode extender: (a) pods requesting capscale.io/underlay-ip, so
// filter, prioritize and bind go through the extender, against (b) pods
// requesting the same capacity as a plain extended resource the nodes
// advertise (capscale.io/underlay-ip-native: 10; kube-scheduler alone).
// --mode native: the same with capscale's native mode (the published
// capacity, deploy/native's scheduler configuration) as side (a). --mode
// plugin: the plane's scheduler is capscale-scheduler (kube-scheduler with
// the UnderlayIP plugin, deploy/plugin's configuration, no extender); side
// (a) is underlay pods through the plugin, side (b) the plain extended
// resource, both on that one binary. --mode dra (issue 56, dra.go): the
// plane's stock kube-scheduler allocates side (a)'s capscale.io/underlay-ip
// from the devices capscale publishes (DRA mode), side (b) is the plain
// extended resource; then one node's budget change is priced both ways.
// --mode
// tax: pods that request no underlay IP, scheduled with the configuration
// capscale ships and with kube-scheduler's defaults.
//
// --scenario keda (issue 27, keda.go): N ScaledObjects on capscale's
// external scaler through KEDA's real operator, beside N HPAs on capscale's
// own APIService: latency and CPU per call at capscale, and the time from a
// load change to every HPA's new desired replicas.
//
// --scenario capacity-source (issue 43, capacitysource.go): the time from
// an IPAM object's change to the Node's mirrored capacity and to a waiting
// pod bound in each mode, and what a capacity source costs
// capscale-controller at 5000 nodes.
//
// Every scenario ends with rows in the shape of BENCHMARKS.md's top table
// (table.go); --scenario gobench prints `go test -bench` output read on
// stdin the same way, for make bench.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// nativeResource is the same capacity as a plain extended resource, which
// the extender does not manage.
const nativeResource = names.UnderlayIPResource + "-native"

func main() {
	nodes := flag.Int("nodes", 500, "kwok nodes for the throughput scenario")
	batch := flag.Int("batch", 500, "throughput: pods per batch")
	rounds := flag.Int("rounds", 8, "throughput: measured rounds per side, alternating (plus one warm-up batch a side)")
	mode := flag.String("mode", "extender", "throughput: extender (extender mode vs a plain extended resource), native (native mode vs the same), plugin (plugin mode's capscale-scheduler vs the same on that binary), plugin-floor (the same resource with and without a plugin that does nothing: the framework's price for one more plugin), plugin-null (plugin mode's pods against the plain resource's on the profile with that plugin: UnderlayIP against the floor), plugin-memo (plugin mode's pods with UnderlayIP's capacity memo against UnderlayIP reading each Node every time), native-prioritize (native mode with the extender as prioritizer only, vs the same), dra (DRA mode: the stock kube-scheduler allocating capscale's devices, vs the same on the plain resource, both scored most free first; then a budget change both ways), dra-unscored (the same with neither resource scored: kube-scheduler's default ranking by CPU and memory), tax (pods without underlay IPs: capscale's scheduler configuration vs kube-scheduler's defaults) or plugin-tax (pods without underlay IPs: capscale-scheduler with deploy/plugin's configuration vs stock kube-scheduler with its defaults)")
	nodeLease := flag.Duration("node-lease", 40*time.Second, "throughput: the kwok nodes' Lease duration (they renew every quarter of it); at 5000 nodes the kubelet's 40s means 500 Lease writes a second, which saturate a 2-core plane")
	extenderFloor := flag.String("extender-floor", "", "throughput, --mode extender: run the null extender (e2e/cmd/nullextender; make bench-e2e builds it) in the extender's place, to read the protocol's floor: 'bind' with filter and bind as deployed, 'filter' with kube-scheduler binding itself")
	extenderHTTPS := flag.Bool("extender-https", false, "throughput: serve the extender over verified TLS, so that kube-scheduler's client multiplexes its calls on one HTTP/2 connection")
	pprofDir := flag.String("pprof-dir", "", "throughput: save 8 s CPU profiles of kube-scheduler and the extender in the first measured round of each side (<process>-<side>.pprof) and its last (<process>-<side>-last.pprof), in this directory")
	jsonFile := flag.String("json", "", "throughput: write the figures to this file as JSON")
	binDir := flag.String("bin-dir", "_output/bin", "control-plane and capscale binaries")
	scenario := flag.String("scenario", "all", "throughput, reaction, memory, metrics, delegate, keda (KEDA's operator on capscale's scaler beside capscale's APIService; make bench-keda), capacity-source (an IPAM object's change to the capacity every mode uses, and a source's cost at --source-cost-nodes), node-patch (what kube-apiserver spends on the mirror's Node patch in each request form), soak (churn and faults, invariants checked every second), gobench (go test -bench output on stdin, printed as table rows) or all (throughput, reaction and memory)")
	gobenchCommand := flag.String("gobench-command", "go test -bench", "gobench: the command that produced the output, for the rows' command column")
	series := flag.Int("series", 1000, "series for the metrics scenario")
	clients := flag.Int("clients", 100, "concurrent clients for the metrics scenario")
	phase := flag.Duration("phase", 8*time.Second, "length of each load phase of the metrics scenario")
	rate := flag.Int("rate", 0, "metrics scenario: open-loop requests per second (0: closed loop with --clients)")
	memNodes := flag.Int("memory-nodes", 5000, "kwok nodes for the memory scenario")
	memPods := flag.Int("memory-pods", 50000, "pods for the memory scenario")
	baselineAdapter := flag.String("baseline-adapter", "", "memory scenario: another metrics-adapter binary to run beside the current one and report (before/after comparisons)")
	samples := flag.Int("samples", 3000, "delegate scenario: timed GETs per path")
	changes := flag.Int("changes", 10, "load-index changes for the reaction scenario")
	soakModes := flag.String("soak-modes", "extender,native,plugin", "soak: the scheduling modes to soak, one after the other")
	soakDuration := flag.Duration("soak-duration", 60*time.Minute, "soak: how long each mode runs (the issue's runs: 60m at --nodes 1000, 15m at --nodes 5000)")
	soakRate := flag.Float64("soak-rate", 10, "soak: churn changes a second")
	soakOut := flag.String("soak-out", "_output/soak", "soak: where each run's samples.csv, processes.csv and violations.txt go")
	scaledObjects := flag.Int("scaled-objects", 300, "keda: ScaledObjects on the KEDA side, HPAs on the APIService side, one Deployment each")
	kedaRounds := flag.Int("keda-rounds", 5, "keda: load changes per side, each moving every HPA's desired replicas")
	kedaPolling := flag.Duration("keda-polling-interval", 30*time.Second, "keda: the ScaledObjects' pollingInterval (KEDA's default 30s)")
	kedaSteady := flag.Duration("keda-steady", 60*time.Second, "keda: the steady window latency and CPU per call are read over")
	kedaSides := flag.String("keda-sides", "apiservice,keda", "keda: the sides to run (the APIService side always first)")
	capacityModes := flag.String("capacity-modes", "plugin,extender,native", "capacity-source: the scheduling modes whose lag is measured, one plane each")
	sourceChanges := flag.Int("source-changes", 100, "capacity-source: IPAM object changes timed per mode")
	costNodes := flag.Int("source-cost-nodes", 5000, "capacity-source: kwok nodes (a CiliumNode each) for the cost part; 0 skips it")
	costEvents := flag.Int("source-cost-events", 5000, "capacity-source: object changes of each kind whose controller CPU is measured")
	churnRates := flag.String("source-churn-rates", "10,25,50", "capacity-source: capacity changes a second across the cost part's nodes, comma-separated; each rate runs the IPAM's writes alone and with capscale mirroring them, timed to the Node and to waiting probe pods; empty skips the churn")
	costMode := flag.String("source-cost-mode", "plugin", "capacity-source: how capscale schedules in the cost part and its churn: plugin (capscale-scheduler), plugin-reads (capscale-scheduler reading the sources itself, the mirror's Node writes at 10 a second after the first pass) extender (kube-scheduler with capscale's extender, which no queueing hint spares a retry) extender-reads (the same, its extender reading the sources itself, the mirror as in plugin-reads) native (kube-scheduler counting the capacity capscale publishes in Node status, the publisher reading the sources itself as the chart does by default) or native-mirror (the same with capscale-controller mirroring and the publisher following its annotations: two Node writes a change)")
	churnSplit := flag.Bool("source-churn-split", false, "capacity-source: at each churn rate also run a round with capscale-controller's watch but none of its Node patches (the IPAM's writes change only fields no preset reads), one with its Node patches but not its watch (capscale-controller stopped, the bench patching as its ServiceAccount), and one with the patches but not the node-writes policy (its binding deleted for the round): which of capscale's loads the plane pays for")
	churnReaders := flag.Int("source-churn-readers", 1, "capacity-source, with --source-churn-split: how many readers of the IPAM's objects the round of capscale's watch alone runs, capscale-controller and the rest more replicas under Leases of their own (3: what two capscale-scheduler replicas reading the objects themselves would add)")
	patchRate := flag.Int("node-patch-rate", 100, "node-patch: the mirror's Node patches a second in each round (--nodes nodes, --rounds rounds of each form, each --source-churn-length long)")
	churnProfiles := flag.String("source-churn-profiles", "", "capacity-source: save kube-apiserver's CPU profile of the idle window and of the first churn round of each rate and kind (kube-apiserver-<rate>-<kind>.pprof) in this directory")
	churnLength := flag.Duration("source-churn-length", 45*time.Second, "capacity-source: how long each churn round runs (and the idle window it is compared with)")
	churnProbes := flag.Int("source-churn-probes", 30, "capacity-source: nodes with a pod waiting for one of the churn's changes, shared out among the rates")
	churnWorkers := flag.String("source-churn-workers", "", "capacity-source: --capacity-source-workers values, comma-separated; each rate then runs one round with capscale for each, in an order turned from rate to rate, capscale-controller restarted between them; empty keeps the controller's default")
	churnMirrorOff := flag.Bool("source-churn-mirror-off", false, "capacity-source, where a scheduler reads the sources itself (plugin-reads, extender-reads): each rate also runs a round with capscale-controller reading no source, so writing no Node, its probes bound by the scheduler's own read alone")
	churnMirrorQPS := flag.String("source-churn-mirror-qps", "", "capacity-source: --capacity-source-qps values (the mirror's Node writes a second after its first pass), comma-separated, each with a burst as large (a long churn's steady state); as --source-churn-workers, and beside it")
	budgetChanges := flag.Int("budget-changes", 50, "throughput, --mode dra: nodes whose budget each round of the budget-change cost changes (4 rounds an arm, alternated); 0 skips it")
	clientQPS := flag.Int("client-qps", 0, "if set, kube-scheduler's and the extender's client QPS (burst twice that); 0 keeps the deployed defaults (50/100)")
	flag.Parse()
	if !slices.Contains(throughputModes, *mode) {
		fmt.Fprintf(os.Stderr, "benche2e: --mode must be one of %s, got %q\n", strings.Join(throughputModes, ", "), *mode)
		os.Exit(2)
	}
	if err := checkFloor(*extenderFloor, *mode, *pprofDir, *extenderHTTPS); err != nil {
		fmt.Fprintf(os.Stderr, "benche2e: %v\n", err)
		os.Exit(2)
	}
	rates, rerr := parseRates(*churnRates)
	if rerr != nil {
		fmt.Fprintf(os.Stderr, "benche2e: --source-churn-rates: %v\n", rerr)
		os.Exit(2)
	}
	workers, werr := parseRates(*churnWorkers)
	if werr != nil {
		fmt.Fprintf(os.Stderr, "benche2e: --source-churn-workers: %v\n", werr)
		os.Exit(2)
	}
	mirrorQPS, qerr := parseRates(*churnMirrorQPS)
	if qerr != nil {
		fmt.Fprintf(os.Stderr, "benche2e: --source-churn-mirror-qps: %v\n", qerr)
		os.Exit(2)
	}
	if err := checkReaders(*churnReaders, *churnSplit); err != nil {
		fmt.Fprintf(os.Stderr, "benche2e: %v\n", err)
		os.Exit(2)
	}
	if err := checkNodeLease(*nodeLease); err != nil {
		fmt.Fprintf(os.Stderr, "benche2e: %v\n", err)
		os.Exit(2)
	}
	planeVersion = kubeVersion(*binDir)
	if *pprofDir != "" {
		// Made now: a missing directory would only show after the plane is up.
		if err := os.MkdirAll(*pprofDir, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "benche2e: --pprof-dir: %v\n", err)
			os.Exit(2)
		}
	}
	var keda kedaOptions
	if *scenario == "keda" {
		sides, err := parseSides(*kedaSides)
		if err == nil {
			keda = kedaOptions{ScaledObjects: *scaledObjects, Rounds: *kedaRounds, Polling: *kedaPolling, Steady: *kedaSteady, Sides: sides, BinDir: *binDir}
			err = keda.check()
		}
		if err == nil {
			err = checkKEDABins(*binDir, sides)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "benche2e: %v\n", err)
			os.Exit(2)
		}
	}
	rig := rigOptions{Mode: *mode, Nodes: *nodes, Batch: *batch, Rounds: *rounds, ClientQPS: *clientQPS, BinDir: *binDir, JSONFile: *jsonFile, PprofDir: *pprofDir, NodeLease: *nodeLease, ExtenderHTTPS: *extenderHTTPS, ExtenderFloor: *extenderFloor, BudgetChanges: *budgetChanges}
	// Ctrl-C or SIGTERM cancels the run: the plane stops and its directory
	// is removed on the way out; a second one kills at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }()
	var err error
	switch *scenario {
	case "throughput":
		err = throughput(ctx, rig)
	case "reaction":
		err = reaction(ctx, *changes, *binDir)
	case "memory":
		err = memory(ctx, *memNodes, *memPods, *binDir, *baselineAdapter)
	case "metrics":
		err = metricsLoad(ctx, *series, *clients, *rate, *phase, *binDir)
	case "delegate":
		err = delegateOverhead(ctx, *samples, *binDir)
	case "gobench":
		err = goBench(*gobenchCommand)
	case "keda":
		err = kedaBench(ctx, keda)
	case "capacity-source":
		err = capacitySourceBench(ctx, *capacityModes, *sourceChanges, *costNodes, *costEvents,
			churnOptions{rates: rates, variants: controllerVariants(workers, mirrorQPS, *churnMirrorOff), split: *churnSplit, readers: *churnReaders, mode: *costMode, length: *churnLength, probes: *churnProbes, profiles: *churnProfiles}, *binDir, *nodeLease)
	case "node-patch":
		err = nodePatchCost(ctx, *nodes, *patchRate, *rounds, *churnLength, *binDir, *nodeLease)
	case "soak":
		err = soakRun(ctx, *soakModes, *nodes, *soakDuration, *soakRate, *soakOut, *binDir, *nodeLease)
	case "all":
		if err = throughput(ctx, rig); err == nil {
			err = reaction(ctx, *changes, *binDir)
		}
		if err == nil {
			err = memory(ctx, *memNodes, *memPods, *binDir, *baselineAdapter)
		}
	default:
		err = fmt.Errorf("--scenario must be throughput, reaction, memory, metrics, delegate, keda, capacity-source, node-patch, soak, gobench or all, got %q", *scenario)
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("interrupted; every plane it started has been stopped and removed (%w)", err)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benche2e:", err)
		os.Exit(1)
	}
}

// bindWatcher records when each pod was first seen bound, and which are
// Ready.
type bindWatcher struct {
	mu      sync.Mutex
	boundAt map[string]time.Time // pod name -> first seen with a node
	batch   map[string]string    // pod name -> batch label
	ready   map[string]int       // batch label -> pods seen Ready
	isReady map[string]bool      // pod name -> counted in ready
}

func newBindWatcher(ctx context.Context, cs kubernetes.Interface, ns string) *bindWatcher {
	w := &bindWatcher{boundAt: map[string]time.Time{}, batch: map[string]string{}, ready: map[string]int{}, isReady: map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = fields.Everything().String() }))
	inf := f.Core().V1().Pods().Informer()
	record := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		w.mu.Lock()
		if _, seen := w.boundAt[p.Name]; !seen {
			w.boundAt[p.Name] = time.Now()
			w.batch[p.Name] = p.Labels["batch"]
		}
		if podReady(p) && !w.isReady[p.Name] {
			w.isReady[p.Name] = true
			w.ready[p.Labels["batch"]]++
		}
		w.mu.Unlock()
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, o any) { record(o) }})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return w
}

func (w *bindWatcher) waitBound(ctx context.Context, batch string, n int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		var times []time.Time
		for name, b := range w.batch {
			if b == batch {
				times = append(times, w.boundAt[name])
			}
		}
		w.mu.Unlock()
		if len(times) == n {
			sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
			return times[n-1], nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("batch %s: %d of %d pods bound after %s", batch, len(times), n, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReady returns once n pods of batch are Ready: kwok has finished
// with them, so their status writes no longer load the plane.
func (w *bindWatcher) waitReady(ctx context.Context, batch string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		ready := w.ready[batch]
		w.mu.Unlock()
		if ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("batch %s: %d of %d pods Ready after %s", batch, ready, n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkCapacity verifies that no node holds more than 10 of either resource.
func checkCapacity(ctx context.Context, cs kubernetes.Interface, ns string) error {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	used := map[string]int{}
	for _, p := range list.Items {
		for r := range p.Spec.Containers[0].Resources.Limits {
			used[p.Spec.NodeName+"/"+string(r)]++
		}
	}
	for k, v := range used {
		if v > 10 {
			return fmt.Errorf("over capacity: %s holds %d", k, v)
		}
	}
	fmt.Printf("# checked: no node above 10 of either resource (%d pods)\n", len(list.Items))
	return nil
}

// checkFloor validates --extender-floor: the null extender stands in for
// the extender's filter and bind only, over plain HTTP, without pprof.
func checkFloor(floor, mode, pprofDir string, https bool) error {
	switch {
	case floor == "":
		return nil
	case floor != "bind" && floor != "filter":
		return fmt.Errorf("--extender-floor must be bind or filter, got %q", floor)
	case mode != "extender":
		return fmt.Errorf("--extender-floor needs --mode extender, got %q", mode)
	case pprofDir != "" || https:
		return fmt.Errorf("--extender-floor runs the null extender, which serves neither pprof nor HTTPS")
	}
	return nil
}

// schedulerConfig returns the scheduler config file for mode with the
// given client QPS (0 keeps deploy/'s file and the defaults), and the
// extender's matching flags. noBind drops the extender's bindVerb, so that
// kube-scheduler binds by itself (--extender-floor filter).
//
// native-prioritize is native mode with the extender kept as a prioritizer
// only (issue 11's alternative to LeastAllocated: the exact free count, one
// round trip instead of three): kube-scheduler still filters, reserves and
// binds the resource itself.
func schedulerConfig(qps int, mode string, noBind bool) (string, []string, error) {
	file := stack.DeployFile("scheduler/kube-scheduler-config.yaml")
	switch {
	case mode == "native" || mode == "native-prioritize" || draMode(mode):
		file = stack.DeployFile("native/kube-scheduler-config.yaml")
	case pluginMode(mode):
		file = stack.DeployFile("plugin/kube-scheduler-config.yaml")
	}
	if qps == 0 && mode != "native-prioritize" && !draMode(mode) && !nullPlugin(mode) && !noBind {
		return file, nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return "", nil, err
	}
	var flags []string
	if qps != 0 {
		m["clientConnection"] = map[string]any{"qps": qps, "burst": 2 * qps}
		flags = []string{fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", 2*qps)}
	}
	if noBind {
		exts, _ := m["extenders"].([]any)
		if len(exts) != 1 {
			return "", nil, fmt.Errorf("%s: want one extender to drop bindVerb from, found %d", file, len(exts))
		}
		ext, _ := exts[0].(map[string]any)
		if ext["bindVerb"] == nil {
			return "", nil, fmt.Errorf("%s: the extender has no bindVerb to drop", file)
		}
		delete(ext, "bindVerb")
	}
	if nullPlugin(mode) {
		if err := addNullProfile(m); err != nil {
			return "", nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	if draMode(mode) {
		if err := draSchedulerConfig(m, mode == "dra"); err != nil {
			return "", nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	if mode == "plugin-memo" {
		if err := addDirectProfile(m); err != nil {
			return "", nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	if mode == "native-prioritize" {
		m["extenders"] = []any{map[string]any{
			"urlPrefix": "http://127.0.0.1:8888", "prioritizeVerb": "prioritize", "weight": 5,
			"nodeCacheCapable": true, "ignorable": true, "httpTimeout": "30s",
			"managedResources": []any{map[string]any{"name": names.UnderlayIPResource, "ignoredByScheduler": false}},
		}}
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return "", nil, err
	}
	f, err := os.CreateTemp("", "capscale-bench-scheduler-*.yaml")
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	if _, err := f.Write(out); err != nil {
		return "", nil, err
	}
	return f.Name(), flags, nil
}

func qpsLabel(qps int) string {
	if qps == 0 {
		return "as deployed (50, burst 100)"
	}
	return fmt.Sprintf("%d, burst %d", qps, 2*qps)
}

// throughputModes are the values --mode takes.
var throughputModes = []string{"extender", "native", "plugin", "plugin-floor", "plugin-null", "plugin-memo", "native-prioritize", "dra", "dra-unscored", "tax", "plugin-tax"}

// pluginMode says whether mode runs plugin mode's scheduler (no extender).
func pluginMode(mode string) bool {
	return mode == "plugin" || mode == "plugin-tax" || nullPlugin(mode)
}

// nullPlugin says whether mode runs the scheduler built with the null plugin
// (and UnderlayIPDirect).
func nullPlugin(mode string) bool {
	return mode == "plugin-floor" || mode == "plugin-null" || mode == "plugin-memo"
}

// nullProfile is plugin-floor's profile: exactProfile with the null plugin
// of cmd/capscale-scheduler/nullplugin added.
const nullProfile = exactProfile + "-null"

// addNullProfile adds nullProfile to the scheduler configuration m: a copy
// of exactProfile that also enables NullPlugin at every extension point.
func addNullProfile(m map[string]any) error {
	return addProfileCopy(m, nullProfile, func(enabled []any, _ map[string]any) ([]any, error) {
		return append(enabled, map[string]any{"name": "NullPlugin"}), nil
	})
}

// addProfileCopy adds to the scheduler configuration m a copy of
// exactProfile named name, whose multiPoint plugins edit rewrites (it is
// handed the copy's enabled list and whole profile).
func addProfileCopy(m map[string]any, name string, edit func(enabled []any, prof map[string]any) ([]any, error)) error {
	profiles, _ := m["profiles"].([]any)
	for _, p := range profiles {
		prof, _ := p.(map[string]any)
		if prof["schedulerName"] != exactProfile {
			continue
		}
		cp := runtime.DeepCopyJSON(prof)
		cp["schedulerName"] = name
		plugins, _ := cp["plugins"].(map[string]any)
		mp, _ := plugins["multiPoint"].(map[string]any)
		if plugins == nil || mp == nil {
			return fmt.Errorf("profile %s enables no multiPoint plugins", exactProfile)
		}
		enabled, _ := mp["enabled"].([]any)
		var err error
		if mp["enabled"], err = edit(enabled, cp); err != nil {
			return fmt.Errorf("profile %s: %w", exactProfile, err)
		}
		m["profiles"] = append(profiles, cp)
		return nil
	}
	return fmt.Errorf("no profile %s to copy", exactProfile)
}

// directProfile is plugin-memo's second profile: exactProfile with
// UnderlayIP replaced by UnderlayIPDirect, the same rule without the
// capacity memo.
const directProfile = exactProfile + "-direct"

// addDirectProfile adds directProfile to the scheduler configuration m.
func addDirectProfile(m map[string]any) error {
	return addProfileCopy(m, directProfile, func(enabled []any, prof map[string]any) ([]any, error) {
		configs, _ := prof["pluginConfig"].([]any)
		renamed := 0
		for _, e := range append(append([]any(nil), enabled...), configs...) {
			if pl, _ := e.(map[string]any); pl["name"] == "UnderlayIP" {
				pl["name"] = "UnderlayIPDirect"
				renamed++
			}
		}
		if renamed != 2 {
			return nil, fmt.Errorf("want UnderlayIP enabled and configured once each, renamed %d", renamed)
		}
		return enabled, nil
	})
}
