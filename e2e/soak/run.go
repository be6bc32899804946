package soak

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// Options size and shape one soak run.
type Options struct {
	// Mode is extender, native or plugin.
	Mode     string
	Nodes    int
	Duration time.Duration
	// BinDir holds the control-plane binaries; CapscaleBin capscale's
	// (default BinDir).
	BinDir, CapscaleBin string
	// OutDir receives samples.csv, processes.csv and violations.txt.
	OutDir string
	// Rate is churn changes a second.
	Rate float64
	// FaultsOnce runs every fault once, spread over the run (the short
	// form); otherwise every fault once in the first half, so that the
	// second half, where growth is fitted, has no restarts.
	FaultsOnce bool
	NodeLease  time.Duration
	Logf       func(string, ...any)
}

// Result is what a run found.
type Result struct {
	Options    Options
	Samples    int
	Counts     map[string]int
	Violations []Violation
	// Growth is the second-half slope of each process's resources.
	Growth map[string]Slope
	Binds  int64
	Faults []string
	// ChurnErrors counts churn calls refused (during faults, mostly).
	ChurnErrors int
	// SchedulerAttempts counts kube-scheduler's scheduling attempts over
	// the run (across its restarts), as far as they were read.
	SchedulerAttempts float64
	// PublishLags are native mode's delays from a capacity change to the
	// publisher's matching Node status.
	PublishLags []time.Duration
}

// Verdicts are one line per invariant: held, or how often it broke.
func (r *Result) Verdicts() []string {
	var out []string
	for _, inv := range Invariants {
		v := "held"
		if n := r.Counts[inv]; n > 0 {
			v = fmt.Sprintf("BROKEN %d times", n)
		}
		if na := notApplicable(r.Options.Mode, inv); na != "" {
			v = "n/a: " + na
		}
		out = append(out, fmt.Sprintf("%-48s %s", inv, v))
	}
	return out
}

// Applicable lists the invariants a mode has something to check for.
func Applicable(mode string) []string {
	var out []string
	for _, inv := range Invariants {
		if notApplicable(mode, inv) == "" {
			out = append(out, inv)
		}
	}
	return out
}

// notApplicable says why a mode has nothing to check for an invariant.
func notApplicable(mode, inv string) string {
	switch {
	case mode == "plugin" && inv == ViewDrift:
		return "the view is kube-scheduler's own cache"
	case mode != "extender" && (inv == ReservationSet || inv == WaitingSet || inv == RequeueBound):
		return "extender mode only"
	}
	return ""
}

// capacityOf gives node i its annotation: most 10 (the default), some 3,
// some 0, one invalid.
func capacityOf(i int, n *corev1.Node) {
	switch {
	case i%10 == 1:
		n.Annotations[names.UnderlayIPCapacityAnnotation] = "3"
	case i%20 == 2:
		n.Annotations[names.UnderlayIPCapacityAnnotation] = "0"
	case i == 3:
		n.Annotations[names.UnderlayIPCapacityAnnotation] = "many"
	}
}

// largeCluster is the size above which the soak scales capacity down,
// fills the cluster before it starts judging and paces its scaling.
const largeCluster = 1000

// schedulerFor is the profile the underlay pods name, as docs/extender-mode.md
// asks of a cluster that wants every pod on a node with the most free IPs:
// capscale-scheduler, which scores every node, in extender and plugin mode.
// On default-scheduler an extender sees only kube-scheduler's sample of the
// nodes (500 of 5000), and a pod whose sample is full waits for its next
// retry with IPs free elsewhere (docs/operations.md; the 5000-node
// extender soak found one Pending 4 minutes with 3 IPs free). Native mode's
// configuration has one profile, and kube-scheduler's own filter finds
// room on any node.
func schedulerFor(mode string) string {
	if mode == "native" {
		return ""
	}
	return "capscale-scheduler"
}

// stepFor is the most replicas one scale of an underlay Deployment moves
// in a cluster of nodes nodes (0: no limit). At or below largeCluster,
// kube-controller-manager's default 20 QPS paces the ReplicaSet controller:
// the 1000-node hour bound 7.4 pods a second. Above it kcm runs at 200 QPS
// (to fill the cluster in minutes), and an unpaced scale to anywhere in the
// band would create or delete hundreds of pods at once: the soak would
// measure the queue behind them, not the rule. Three replicas a scale, at
// four scales a second (40% of 10 changes), give the same pace: about 6
// pods created and 6 deleted a second, plus the bare pods.
func stepFor(nodes int) int32 {
	if nodes <= largeCluster {
		return 0
	}
	return 3
}

// capacityFor is capacityOf for a cluster of nodes nodes. Above
// largeCluster, the nodes capacityOf leaves at the default get 2 instead,
// so that demand near capacity stays about the 1000-node soak's pods (a
// two-core machine cannot run 44,000 pods) while each decision still
// ranks every node.
func capacityFor(nodes int) func(int, *corev1.Node) {
	if nodes <= largeCluster {
		return capacityOf
	}
	return func(i int, n *corev1.Node) {
		capacityOf(i, n)
		if _, ok := n.Annotations[names.UnderlayIPCapacityAnnotation]; !ok {
			n.Annotations[names.UnderlayIPCapacityAnnotation] = "2"
		}
	}
}

const adapterConfig = `sources:
- name: load
  url: %s
  jsonPath: '{.data.load_balance}'
  interval: 2s
  timeout: 1s
  maxAge: 10s
  tls: {caFile: %s}
`

// Run soaks one mode and returns what the checker found. It fails only
// when the rig cannot run; broken invariants are in the Result.
func Run(ctx context.Context, o Options) (*Result, error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	ld := newLoad(2*time.Second, 10*time.Second)
	srv := httptest.NewTLSServer(ld.src)
	defer srv.Close()
	caFile := filepath.Join(o.OutDir, "load-ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		return nil, err
	}
	cfg := filepath.Join(o.OutDir, "adapter.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(adapterConfig, srv.URL+"/load", caFile)), 0o644); err != nil {
		return nil, err
	}
	bin := o.CapscaleBin
	if bin == "" {
		bin = o.BinDir
	}
	var kcmFlags []string
	if o.Nodes > largeCluster {
		// At its default 20 QPS the ReplicaSet controller takes minutes to
		// create the pods and to lift 5000 new nodes' taints (kwokctl lifts
		// the same limit for large clusters).
		kcmFlags = []string{"--kube-api-qps=200", "--kube-api-burst=400"}
	}
	s, err := stack.Start(ctx, stack.Options{
		BinDir: bin,
		Plane: plane.Options{BinDir: o.BinDir, Nodes: o.Nodes, Node: capacityFor(o.Nodes), NodeLeaseDuration: o.NodeLease,
			HPASyncPeriod: 5 * time.Second, Logf: logf, ExtraSchedulerFlags: []string{"--v=2"}, ExtraControllerManagerFlags: kcmFlags},
		Extender: o.Mode != "plugin", Native: o.Mode == "native", Plugin: o.Mode == "plugin",
		Adapter: true, AdapterConfig: cfg,
	})
	if err != nil {
		return nil, err
	}
	defer s.Stop()
	// Kept beside the samples, to find why a pod waited (kube-scheduler
	// logs each attempt at --v=2).
	defer func() {
		if err := s.Plane.SaveLogs(filepath.Join(o.OutDir, "logs")); err != nil {
			logf("soak: saving the logs: %v", err)
		}
	}()
	r := &Result{Options: o, Counts: map[string]int{}, Growth: map[string]Slope{}}
	err = soak(ctx, s, o, ld, r, logf)
	if err != nil {
		err = fmt.Errorf("%w\n%s", err, s.LogTails(30))
	}
	return r, err
}

func soak(ctx context.Context, s *stack.Stack, o Options, ld *load, r *Result, logf func(string, ...any)) error {
	obs, err := newObserver(ctx, s.Client, 10, o.Mode == "native")
	if err != nil {
		return err
	}
	if err := s.WaitForNamespace(ctx, Namespace); err != nil {
		return err
	}
	if o.Mode == "native" {
		// The publisher writes every node's first capacity at its client
		// limit (1000 nodes: about 20 s); judging starts once it is done.
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
			return obs.unpublished() == 0, nil
		}); err != nil {
			return fmt.Errorf("waiting for the first publication of every node: %d unpublished: %w", obs.unpublished(), err)
		}
	}
	var sample Sample
	obs.snapshot(&sample)
	var total int64
	nodeNames := make([]string, 0, len(sample.Nodes))
	for _, n := range sample.Nodes {
		total += n.Capacity
		nodeNames = append(nodeNames, n.Name)
	}
	rng := rand.New(rand.NewPCG(1, uint64(o.Nodes)))
	ch := &churn{c: s.Client, rng: rng, ipDeployments: []string{"ip-a", "ip-b", "ip-c", "ip-d"}, capacity: total, nodes: nodeNames, logf: logf, maxStep: stepFor(o.Nodes), scheduler: schedulerFor(o.Mode)}
	if err := ch.setUp(ctx); err != nil {
		return err
	}
	if err := createHPA(ctx, s); err != nil {
		return err
	}
	if o.Nodes > largeCluster {
		// The scheduler binds tens of pods a second at this size: pods
		// queued behind the fill are not waiting for an IP. Judge from a
		// full cluster.
		logf("soak: filling %d IPs before the clock starts", total)
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 30*time.Minute, true, func(context.Context) (bool, error) {
			obs.snapshot(&sample)
			var used int64
			for _, n := range sample.Nodes {
				used += n.Used
			}
			logf("soak: %d of %d IPs used, %d pods Pending", used, ch.replicas(), len(sample.Pending))
			return used >= ch.replicas(), nil
		}); err != nil {
			return fmt.Errorf("filling the cluster: %w", err)
		}
	}
	hc, err := s.ExtenderHTTPClient()
	if o.Mode == "plugin" {
		hc, err = http.DefaultClient, nil
	}
	if err != nil {
		return err
	}
	// kube-scheduler's /metrics takes the admin client certificate.
	adminHTTP, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		return err
	}

	runCtx, stop := context.WithTimeout(ctx, o.Duration)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); ch.run(runCtx, o.Rate, 20*time.Second, 45*time.Second) }()
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				ld.step(rng, n)
			}
		}
	}()
	fs := &faults{s: s, mode: o.Mode, logf: logf}
	go func() { defer wg.Done(); fs.run(runCtx, o.Duration, o.FaultsOnce) }()

	out, err := newOutput(o.OutDir)
	if err != nil {
		return err
	}
	defer out.close()
	checker := NewChecker(DefaultBounds)
	usage := map[string][]Point{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prevBinds := obs.binds()
	startBinds := prevBinds // a large cluster's fill is not the run's
	var attempts counter
	for i := 0; ; i++ {
		select {
		case <-runCtx.Done():
			stop()
			wg.Wait()
			for _, v := range checker.Close() {
				if len(r.Violations) < 200 {
					r.Violations = append(r.Violations, v)
				}
				out.violation(v)
			}
			r.Samples, r.Counts, r.Binds, r.Faults, r.ChurnErrors = checker.Samples, checker.Counts, obs.binds()-startBinds, fs.done, ch.Errors
			r.SchedulerAttempts = attempts.total
			r.PublishLags = obs.lags()
			for name, pts := range usage {
				r.Growth[name] = SecondHalfSlope(pts)
			}
			return nil
		case <-tick.C:
		}
		sample := Sample{At: time.Now(), Fault: fs.current()}
		switch o.Mode {
		case "extender":
			sample.View = "ledger"
		case "native":
			sample.View = "published"
		}
		obs.snapshot(&sample)
		extenderUp := o.Mode != "plugin" && sample.Fault != "kill extender"
		if o.Mode == "extender" && extenderUp {
			if err := ledger(ctx, hc, s.ExtenderURL, obs, &sample); err != nil {
				sample.View = "" // nothing to compare while it does not answer
				logf("soak: reading /capacity: %v", err)
			}
			if w, q, err := extenderCounters(ctx, hc, s.ExtenderURL); err == nil {
				sample.WaitingPods, sample.RequeueWrites = &w, &q
			}
		}
		if sample.Fault != "kill the scheduler" {
			if n, err := schedulerAttempts(ctx, adminHTTP, s.Plane.SchedulerEndpoint()); err == nil {
				sample.SchedulerAttempts = &n
				attempts.add(n)
			}
		}
		sample.Metrics = []Metric{readMetric(ctx, s, ld)}
		vs := checker.Observe(sample)
		for _, v := range vs {
			if len(r.Violations) < 200 {
				r.Violations = append(r.Violations, v)
			}
			out.violation(v)
		}
		binds := obs.binds()
		out.sample(sample, binds-prevBinds, len(vs))
		prevBinds = binds
		if i%10 == 0 {
			for name, pid := range capscalePIDs(s, o.Mode) {
				if u, err := procUsage(pid); err == nil {
					usage[name+" rss"] = append(usage[name+" rss"], Point{sample.At, u.RSSBytes})
					usage[name+" conns"] = append(usage[name+" conns"], Point{sample.At, u.Conns})
					out.process(sample.At, name, u)
				}
			}
		}
	}
}

// capscalePIDs names the running capscale processes.
func capscalePIDs(s *stack.Stack, mode string) map[string]int {
	out := map[string]int{}
	if s.Adapter != nil {
		if exited, _ := s.Adapter.Exited(); !exited {
			out["metrics-adapter"] = s.Adapter.Pid()
		}
	}
	if mode == "plugin" {
		if p := s.Scheduler(); p != nil {
			out["capscale-scheduler"] = p.Pid()
		}
	} else if s.Extender != nil {
		if exited, _ := s.Extender.Exited(); !exited {
			out["extender"] = s.Extender.Pid()
		}
	}
	return out
}

// createHPA scales a plain Deployment on the load index through
// capscale's APIService, so that an HPA reads it the whole run.
func createHPA(ctx context.Context, s *stack.Stack) error {
	if _, err := s.Client.AppsV1().Deployments(Namespace).Create(ctx, deployment("web", 1, 0, ""), metav1.CreateOptions{}); err != nil {
		return err
	}
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: Namespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    ptr.To(int32(1)), MaxReplicas: 10,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: names.LoadIndexMetric, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"source": "load"}}},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewMilliQuantity(100, resource.DecimalSI)},
			}}},
		},
	}
	_, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(Namespace).Create(ctx, h, metav1.CreateOptions{})
	return err
}

// readMetric reads the load index the way the HPA controller does,
// through the aggregator.
func readMetric(ctx context.Context, s *stack.Stack, ld *load) Metric {
	m := Metric{Name: names.LoadIndexMetric}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var list struct {
		Items []struct {
			Value resource.Quantity `json:"value"`
		} `json:"items"`
	}
	raw, err := s.Client.Discovery().RESTClient().Get().
		AbsPath("/apis/external.metrics.k8s.io/v1beta1/namespaces", Namespace, names.LoadIndexMetric).
		Param("labelSelector", "source=load").DoRaw(ctx)
	if err == nil {
		err = json.Unmarshal(raw, &list)
	}
	switch {
	case err != nil:
		m.Err = err.Error()
	case len(list.Items) != 1:
		m.Err = fmt.Sprintf("%d items", len(list.Items))
	default:
		m.Value = list.Items[0].Value.AsApproximateFloat64()
	}
	m.Expected = ld.expected(time.Now(), 3*time.Second)
	return m
}

// output writes samples.csv, processes.csv and violations.txt.
type output struct {
	samples, procs *csv.Writer
	files          []*os.File
	violations     *os.File
	start          time.Time
}

func newOutput(dir string) (*output, error) {
	o := &output{start: time.Now()}
	for _, name := range []string{"samples.csv", "processes.csv", "violations.txt"} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			o.close()
			return nil, err
		}
		o.files = append(o.files, f)
	}
	o.samples, o.procs, o.violations = csv.NewWriter(o.files[0]), csv.NewWriter(o.files[1]), o.files[2]
	_ = o.samples.Write([]string{"seconds", "binds_per_s", "pending", "used_ips", "capacity_ips", "drift_nodes", "reservations", "waiting", "requeue_writes", "fault", "violations"})
	_ = o.procs.Write([]string{"seconds", "process", "rss_mb", "sockets"})
	return o, nil
}

func (o *output) sample(s Sample, binds int64, violations int) {
	var used, capacity int64
	drift := 0
	for _, n := range s.Nodes {
		used += n.Used
		capacity += n.Capacity
		want := n.Used
		if s.View == "published" && !n.Invalid {
			want = n.Capacity
		}
		if s.View != "" && (n.View == nil || *n.View != want) {
			drift++
		}
	}
	opt := func(p *float64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatFloat(*p, 'f', -1, 64)
	}
	_ = o.samples.Write([]string{secs(s.At.Sub(o.start)), strconv.FormatInt(binds, 10), strconv.Itoa(len(s.Pending)),
		strconv.FormatInt(used, 10), strconv.FormatInt(capacity, 10), strconv.Itoa(drift), strconv.Itoa(len(s.Reservations)),
		opt(s.WaitingPods), opt(s.RequeueWrites), s.Fault, strconv.Itoa(violations)})
	o.samples.Flush()
}

func (o *output) process(at time.Time, name string, u Usage) {
	_ = o.procs.Write([]string{secs(at.Sub(o.start)), name, strconv.FormatFloat(u.RSSBytes/(1<<20), 'f', 1, 64), strconv.FormatFloat(u.Conns, 'f', 0, 64)})
	o.procs.Flush()
}

func (o *output) violation(v Violation) { fmt.Fprintln(o.violations, v) }

func (o *output) close() {
	for _, f := range o.files {
		_ = f.Close()
	}
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) }

// Summary is the run in a few lines: figures, verdicts, growth.
func (r *Result) Summary() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "soak %s mode: %d nodes, %s, %d samples, %d binds (%.1f/s), %.0f scheduling attempts (%.1f/s), %d churn calls refused, faults: %s\n",
		o.Mode, o.Nodes, o.Duration, r.Samples, r.Binds, float64(r.Binds)/o.Duration.Seconds(), r.SchedulerAttempts, r.SchedulerAttempts/o.Duration.Seconds(),
		r.ChurnErrors, strings.Join(r.Faults, ", "))
	for _, v := range r.Verdicts() {
		fmt.Fprintln(&b, "  "+v)
	}
	if l := r.PublishLags; len(l) > 0 {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		fmt.Fprintf(&b, "  capacity change to published: %d changes, median %s, p90 %s, max %s\n", len(l),
			l[len(l)/2].Round(time.Millisecond), l[len(l)*9/10].Round(time.Millisecond), l[len(l)-1].Round(time.Millisecond))
	}
	var names []string
	for n := range r.Growth {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		g := r.Growth[n]
		unit, scale := "", 1.0
		if strings.HasSuffix(n, " rss") {
			unit, scale = " MiB", 1.0/(1<<20)
		}
		fmt.Fprintf(&b, "  growth %-28s %+.2f%s/h [%+.2f, %+.2f] over %d points of the second half\n", n, g.PerHour*scale, unit, g.Lo*scale, g.Hi*scale, g.N)
	}
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "  ... %d more in violations.txt\n", len(r.Violations)-20)
			break
		}
		fmt.Fprintln(&b, "  "+v.String())
	}
	return b.String()
}
