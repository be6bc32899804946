package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// churnOptions is the churn part of the capacity-source cost (issue 55 §6):
// at each of rates, capacity changes a second across the nodes for length,
// and probe nodes with a pod waiting for the capacity one change brings.
type churnOptions struct {
	nodes, probes int
	rates         []int
	// variants are the capscale-controller flags each rate's rounds with
	// capscale run with, one round each (--capacity-source-workers=16,
	// --capacity-source-qps=1); empty: one round, as started.
	variants []string
	// split adds three rounds at each rate that tell capscale's loads
	// apart: its watch of the IPAM's objects without its Node patches,
	// the patches without the watch, and the patches without the
	// node-writes policy (roundKind).
	split bool
	// readers is how many readers of the IPAM's objects the split's
	// watch-alone round runs: capscale-controller and readers-1 more
	// replicas (startReaders).
	readers int
	length  time.Duration
	// profiles, if set, is where kube-apiserver's CPU profiles of the
	// idle window and of each kind of round's first go (apiprofile.go).
	profiles string
	// mode is how capscale schedules: plugin (capscale-scheduler),
	// plugin-reads, extender (kube-scheduler asking capscale's extender)
	// or native (kube-scheduler counting the published allocatable).
	mode string
}

// noMirror is the variant in which capscale-controller reads no source
// and so writes no Node: where a scheduler reads the sources itself, what
// the mirror's patches cost it.
const noMirror = "--capacity-sources="

// controllerVariants are the capscale-controller flags of the churn's
// rounds with capscale: one per worker count, one per mirror rate, and
// noMirror last if off.
func controllerVariants(workers, mirrorQPS []int, off bool) []string {
	var out []string
	for _, n := range workers {
		out = append(out, fmt.Sprintf("--capacity-source-workers=%d", n))
	}
	// The burst as the rate: a long churn's steady state, not the first
	// pass the chart's burst of 5000 is for (a restarted controller's
	// bucket starts full, and would write a whole round at will).
	for _, q := range mirrorQPS {
		out = append(out, fmt.Sprintf("--capacity-source-qps=%d --capacity-source-burst=%d", q, q))
	}
	if off {
		out = append(out, noMirror)
	}
	return out
}

// checkReaders: more readers than capscale-controller only where there is
// a watch-alone round to run them in.
func checkReaders(readers int, split bool) error {
	if readers < 1 || readers > 1 && !split {
		return fmt.Errorf("--source-churn-readers must be at least 1, and more than 1 only with --source-churn-split, got %d", readers)
	}
	return nil
}

// parseRates reads a comma-separated list of positive numbers (changes a
// second, or worker counts); empty is none.
func parseRates(s string) ([]int, error) {
	var rates []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, err := strconv.Atoi(f)
		if err != nil || r < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		rates = append(rates, r)
	}
	return rates, nil
}

// pending is when each awaited state's change was written, and how long
// it took to be seen. The clock starts when the IPAM's write returns to
// its writer (the bench), not when it is sent: on a loaded plane the write
// itself takes hundreds of milliseconds, none of them capscale's. A state
// seen before its write returned counts 0.
type pending struct {
	mu      sync.Mutex
	want    map[string]pendingChange // by node (mirror) or pod (bound)
	latency []seenAt
}

type pendingChange struct {
	value string
	at    time.Time // zero until the write returned
	seen  bool
}

// expect is called before the write, written after it returned.
func (p *pending) expect(key, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.want[key] = pendingChange{value: value}
}

func (p *pending) written(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.want[key]
	switch {
	case !ok:
	case w.seen:
		p.latency = append(p.latency, seenAt{at: time.Now()})
		delete(p.want, key)
	default:
		w.at = time.Now()
		p.want[key] = w
	}
}

func (p *pending) seen(key, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.want[key]
	switch {
	case !ok || w.value != value:
	case w.at.IsZero():
		w.seen = true
		p.want[key] = w
	default:
		p.latency = append(p.latency, seenAt{at: time.Now(), lag: float64(time.Since(w.at)) / float64(time.Millisecond)})
		delete(p.want, key)
	}
}

func (p *pending) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.want)
}

// reset forgets the latencies recorded so far.
func (p *pending) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = nil
}

// done is the latencies recorded, in ms, each with when it was seen.
func (p *pending) done() []seenAt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seenAt(nil), p.latency...)
}

func lagsOf(xs []seenAt) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x.lag
	}
	return out
}

// apiserverCost is a window's Node writes, requests and Node watch bytes;
// durSum and durCount are apiserver_request_duration_seconds' by
// verb/resource/subresource, waitSum and waitCount priority and
// fairness's queueing by priority level, and gcs kube-apiserver's garbage
// collections: where a slow round's time went.
type apiserverCost struct {
	nodePatches, requests, nodeWatchBytes float64
	durSum, durCount, waitSum, waitCount  map[string]float64
	gcs                                   float64
	// terminated are the watchers kube-apiserver closed for not keeping
	// up, by resource.
	terminated map[string]float64
}

func readCost(ctx context.Context, s *stack.Stack) (apiserverCost, error) {
	f, err := scrapeAPIServer(ctx, s.Client)
	if err != nil {
		return apiserverCost{}, err
	}
	var c apiserverCost
	for k, v := range f.counters("apiserver_request_total", "verb", "resource") {
		c.requests += v
		if k == "PATCH/nodes" {
			c.nodePatches += v
		}
	}
	c.nodeWatchBytes = f.sums("apiserver_watch_events_sizes", "resource")["nodes"]
	c.durSum = f.sums("apiserver_request_duration_seconds", "verb", "resource", "subresource")
	c.durCount = f.counts("apiserver_request_duration_seconds", "verb", "resource", "subresource")
	c.waitSum = f.sums("apiserver_flowcontrol_request_wait_duration_seconds", "priority_level")
	c.waitCount = f.counts("apiserver_flowcontrol_request_wait_duration_seconds", "priority_level")
	c.terminated = f.counters("apiserver_terminated_watchers_total", "resource")
	if fam, ok := f["go_gc_duration_seconds"]; ok && len(fam.GetMetric()) > 0 {
		c.gcs = float64(fam.GetMetric()[0].GetSummary().GetSampleCount())
	}
	return c, nil
}

// meansMs is each key's mean in ms over the window from since, for the
// keys in want that were counted in it.
func meansMs(sum, count, sumSince, countSince map[string]float64, want ...string) string {
	var parts []string
	for _, k := range want {
		if n := count[k] - countSince[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f ms (%.0f)", k, (sum[k]-sumSince[k])*1000/n, n))
		}
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

// slowParts says where kube-apiserver's time went from since: the mean of
// the requests on the path (the IPAM's writes, the mirror's patch, the
// bind), priority and fairness's mean queueing by level, and its GCs.
func (c apiserverCost) slowParts(since apiserverCost) string {
	levels := make([]string, 0, len(c.waitCount))
	for k := range c.waitCount {
		levels = append(levels, k)
	}
	slices.Sort(levels)
	var closed []string
	for k, v := range c.terminated {
		if d := v - since.terminated[k]; d > 0 {
			closed = append(closed, fmt.Sprintf("%s %.0f", k, d))
		}
	}
	slices.Sort(closed)
	return fmt.Sprintf("kube-apiserver means: %s; APF queueing: %s; kube-apiserver GCs %.0f; watchers closed for not keeping up: %v",
		meansMs(c.durSum, c.durCount, since.durSum, since.durCount, "PUT/ciliumnodes", "PUT/ciliumnodes/status", "PATCH/nodes", "POST/pods/binding"),
		meansMs(c.waitSum, c.waitCount, since.waitSum, since.waitCount, levels...), c.gcs-since.gcs, closed)
}

func (c apiserverCost) rates(since apiserverCost, d time.Duration) apiserverCost {
	s := d.Seconds()
	return apiserverCost{
		nodePatches:    (c.nodePatches - since.nodePatches) / s,
		requests:       (c.requests - since.requests) / s,
		nodeWatchBytes: (c.nodeWatchBytes - since.nodeWatchBytes) / s,
	}
}

// sourceChurn runs the churn on a stack whose nodes are all mirrored. For
// each rate it runs two rounds of o.length, their order alternated from
// rate to rate: the IPAM's writes alone (capscale-controller stopped with
// SIGSTOP, so the plane's own cost and write latency show), and the same
// writes with capscale mirroring them, where every o.length/k one of k
// probe nodes, each with a pod waiting at capacity 0, goes to 1. The IPAM
// writes as cilium-operator (ipamwriter.go). It reports per rate the
// object-to-Node lag of every change, the object-to-bound lag of every
// probe, the IPAM's write latency on each side, and kube-apiserver's cost
// beside an idle window.
func sourceChurn(ctx context.Context, s *stack.Stack, uids map[string]types.UID, o churnOptions) ([]row, error) {
	span := o.nodes - o.probes
	withRounds := max(len(o.variants), 1)
	perRound := o.probes / max(len(o.rates)*withRounds, 1)
	if span < 1 || len(o.rates) == 0 || slices.Min(o.rates) < 1 || perRound < 1 || o.length < time.Second {
		return nil, fmt.Errorf("churn: %d nodes, %d probes, rates %v a second for %s: want a node left to change, a probe per rate, a change a second and a second", o.nodes, o.probes, o.rates, o.length)
	}
	w, err := newIPAMWriter(ctx, s)
	if err != nil {
		return nil, err
	}
	mirror := &pending{want: map[string]pendingChange{}}
	bound := &pending{want: map[string]pendingChange{}}
	factory := informers.NewSharedInformerFactory(s.Client, 0)
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) {
			n := cur.(*corev1.Node)
			mirror.seen(n.Name, n.Annotations[names.UnderlayIPSourceCapacityAnnotation])
		},
	})
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) {
			if p := cur.(*corev1.Pod); p.Spec.NodeName != "" {
				bound.seen(p.Name, "bound")
			}
		},
	})
	// The IPAM's writes as a watch of kube-apiserver's sees them, metadata
	// only: what capscale-controller's watch waits for, at little cost to
	// the bench.
	delivered := newDelivery()
	meta, err := metadata.NewForConfig(s.Config)
	if err != nil {
		return nil, err
	}
	metaFactory := metadatainformer.NewSharedInformerFactory(meta, 0)
	_, _ = metaFactory.ForResource(ciliumNodes).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) {
			if m, ok := cur.(*metav1.PartialObjectMetadata); ok {
				delivered.seen(m.Name, m.ResourceVersion)
			}
		},
	})
	informersCtx, stop := context.WithCancel(ctx)
	factory.Start(informersCtx.Done())
	metaFactory.Start(informersCtx.Done())
	defer func() { stop(); factory.Shutdown(); metaFactory.Shutdown() }()
	factory.WaitForCacheSync(ctx.Done())
	metaFactory.WaitForCacheSync(ctx.Done())

	const ns = "churn"
	probe := func(j int) string { return plane.NodeName(span + j) }
	if err := placeProbes(ctx, s, w, uids, ns, o.probes, probe); err != nil {
		return nil, err
	}

	// An idle window first, as long as a round, for what the plane costs
	// anyway (kwok's Leases, the controllers' resyncs).
	idleFrom, err := readCost(ctx, s)
	if err != nil {
		return nil, err
	}
	prof, err := newAPIProfiler(s.Config, o.profiles)
	if err != nil {
		return nil, err
	}
	pids := livePids(s.Plane)
	cpuFrom, err := sampleCPU(pids)
	if err != nil {
		return nil, err
	}
	t := time.Now()
	profiled := prof.start(ctx, "idle", o.length-time.Second)
	time.Sleep(o.length)
	profiled()
	idleTo, err := readCost(ctx, s)
	if err != nil {
		return nil, err
	}
	cpuTo, err := sampleCPU(pids)
	if err != nil {
		return nil, err
	}
	idle := idleTo.rates(idleFrom, time.Since(t))

	r := &churnRun{s: s, w: w, uids: uids, span: span, length: o.length, mirror: mirror, bound: bound, probe: probe, delivered: delivered, prof: prof,
		idle: idleRates(cpuFrom, cpuTo, time.Since(t)), last: map[string]int{}, readers: o.readers}
	if o.split {
		if r.patcher, err = newNodePatcher(ctx, s); err != nil {
			return nil, err
		}
	}
	var rows []row
	nextProbe := 0
	for i, rate := range o.rates {
		// The sides in an order turned by one from rate to rate: the IPAM
		// alone, capscale with each of o.variants (or as started), and
		// with split the parts of capscale's load.
		type side struct {
			kind    roundKind
			variant string
		}
		sides := []side{{kind: ipamAlone}}
		if len(o.variants) == 0 {
			sides = append(sides, side{kind: withCapscale})
		}
		for _, v := range o.variants {
			sides = append(sides, side{kind: withCapscale, variant: v})
		}
		if o.split {
			sides = append(sides, side{kind: watchOnly}, side{kind: patchOnly}, side{kind: patchUnchecked})
		}
		sides = slices.Concat(sides[i%len(sides):], sides[:i%len(sides)])
		var alone churnRound
		// Each round with capscale keeps its side: the order turns.
		type sided struct {
			side
			round churnRound
		}
		var with []sided
		for _, sd := range sides {
			if sd.variant != "" {
				if err := r.restartController(ctx, sd.variant); err != nil {
					return nil, err
				}
			}
			probes := 0
			if sd.kind == withCapscale {
				probes = perRound
			}
			round, err := r.round(ctx, rate, sd.kind, nextProbe, probes)
			if err != nil {
				return nil, err
			}
			switch sd.kind {
			case ipamAlone:
				alone = round
			case withCapscale:
				with = append(with, sided{sd, round})
				nextProbe += perRound
			}
		}
		for _, w := range with {
			label := ""
			if o.mode != "plugin" {
				label = ", " + o.mode + " mode"
			}
			if w.variant != "" {
				label += ", " + w.variant
			}
			rows = append(rows, churnRows(o.nodes, rate, label, alone, w.round, idle)...)
		}
	}
	return rows, nil
}

// restartController runs capscale-controller with the flag variant added
// to the stack's, unless it runs so already: the replica is stopped and a
// new one started, which lists every Node and object again and writes
// nothing where the Nodes are up to date (waitQuiet before the next round
// lets that pass).
func (r *churnRun) restartController(ctx context.Context, variant string) error {
	if r.variant == variant {
		return nil
	}
	r.s.Controller.Stop(30 * time.Second)
	r.restarts++
	c, err := r.s.StartController(ctx, fmt.Sprintf("controller-churn-%d", r.restarts), strings.Fields(variant)...)
	if err != nil {
		return fmt.Errorf("restarting capscale-controller with %s: %w", variant, err)
	}
	r.s.Controller = c
	r.variant = variant
	fmt.Printf("# capscale-controller restarted with %s\n", variant)
	return nil
}

// startReaders runs n more capscale-controller replicas, each under a
// Lease of its own so that each leads and watches the IPAM's objects: the
// readers that schedulers reading the objects themselves would add (two
// capscale-scheduler replicas beside capscale-controller). They find every
// Node up to date and write none.
func (r *churnRun) startReaders(ctx context.Context, n int) (stop func(), err error) {
	var started []*stack.ControllerReplica
	stop = func() {
		for _, c := range started {
			c.Stop(30 * time.Second)
		}
	}
	for range n {
		r.readerRuns++
		name := fmt.Sprintf("controller-reader-%d", r.readerRuns)
		c, err := r.s.StartController(ctx, name, "--leader-elect-resource-name="+name)
		if err != nil {
			stop()
			return nil, fmt.Errorf("starting reader %s: %w", name, err)
		}
		started = append(started, c)
	}
	return stop, nil
}

// placeProbes gives each probe node capacity 0 and a pod that waits on it.
func placeProbes(ctx context.Context, s *stack.Stack, w *ipamWriter, uids map[string]types.UID, ns string, n int, probe func(int) string) error {
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		return err
	}
	for j := range n {
		if err := w.put(ctx, ipamtest.CiliumNodeENI(probe(j), uids[probe(j)], 2, nil)); err != nil {
			return err
		}
	}
	for j := range n {
		node := probe(j)
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			return err == nil && n.Annotations[names.UnderlayIPSourceCapacityAnnotation] == "0", nil
		}); err != nil {
			return fmt.Errorf("probe node %s never mirrored 0: %w", node, err)
		}
		p := benchUnderlayPod(ns, probeName(j))
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		if _, err := s.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for j := range n {
		name := probeName(j)
		var last *corev1.Pod
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if last = p; p.Spec.NodeName != "" {
				return false, fmt.Errorf("bound to %s, whose mirrored capacity is 0%s", p.Spec.NodeName, allocatableOf(ctx, s, p.Spec.NodeName))
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return fmt.Errorf("probe pod %s never waited: %w (its conditions: %v)", name, err, conditionsOf(last))
		}
	}
	return nil
}

// allocatableOf is what a node publishes of the resource, for an error.
func allocatableOf(ctx context.Context, s *stack.Stack, node string) string {
	n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	if q, ok := n.Status.Allocatable[names.UnderlayIPResource]; ok {
		return ", its published allocatable " + q.String()
	}
	return ""
}

func conditionsOf(p *corev1.Pod) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, c := range p.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return out
}

func probeName(j int) string { return fmt.Sprintf("probe-%03d", j) }
