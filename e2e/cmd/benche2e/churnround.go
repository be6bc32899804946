package main

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// churnRun is what the churn's rounds share; next numbers the changes over
// every round, so that each pass over the nodes writes a value the
// previous pass did not.
type churnRun struct {
	s             *stack.Stack
	w             *ipamWriter
	uids          map[string]types.UID
	span          int
	length        time.Duration
	mirror, bound *pending
	// delivered times the IPAM's writes to the bench's own CiliumNode
	// watch: kube-apiserver's part of the mirror's lag.
	delivered *delivery
	probe     func(int) string
	next      int
	// idle is each measured process's CPU rate in the idle window: a round
	// starts once the plane is back at it (waitQuiet), so that no round
	// inherits the backlog of the one before, nor of the fresh install.
	idle map[string]float64
	// last is the capacity the churn last gave each node, and written
	// those nodes in the order first written (a watchOnly round rewrites
	// them).
	last    map[string]int
	written []string
	// patcher writes the Node patches of a patchOnly round.
	patcher *nodePatcher
	// variant is the flag capscale-controller was restarted with, "" as
	// the stack started it; restarts counts its restarts (each a log).
	variant  string
	restarts int
	// prof profiles kube-apiserver over each kind's first round (nil: not).
	prof *apiProfiler
	// readers is how many readers of the IPAM's objects a watchOnly round
	// runs, capscale-controller included; readerRuns names the extra ones.
	readers, readerRuns int
}

// churnRound is one round's figures.
type churnRound struct {
	achieved  float64
	writes    []float64 // each CiliumNode write, spec and status, in ms
	lag, bind []float64 // ms
	// delivered is each IPAM write to a watch of kube-apiserver's (ms):
	// the part of lag before capscale-controller can act.
	delivered       []float64
	cost            apiserverCost
	controllerCPUms float64
	// cpuMs is every plane and capscale process's CPU from the round's
	// start to the end of its drain; waited is how long the round waited
	// for the plane to be quiet first, and quiet whether it got there.
	cpuMs map[string]float64
	// writingMs is the same from the round's start to its last write,
	// less each process's idle rate (the plane's own fixed load, large at
	// 5000 nodes): with capscale stopped (alone) it holds none of
	// capscale's work, so the sides' difference is what capscale adds.
	writingMs map[string]float64
	changes   int
	waited    time.Duration
	quiet     bool
}

// allCPU reads the CPU time of every process of the plane that runs,
// capscale's included (sampleCPU reads the measured ones only).
func allCPU(p *plane.Plane) cpuTimes {
	out := cpuTimes{}
	for name, pid := range livePids(p) {
		if d, err := procCPU(pid); err == nil {
			out[name] = d
		}
	}
	return out
}

// perChangeMs is ms over the round's changes.
func (c churnRound) perChangeMs(ms float64) float64 { return ms / float64(max(c.changes, 1)) }

// roundKind is what runs beside the IPAM's writes in a round.
type roundKind int

const (
	// withCapscale: capscale-controller watches and mirrors; lag timed.
	withCapscale roundKind = iota
	// ipamAlone: capscale-controller stopped (SIGSTOP); its lag is drained
	// once it runs again, not timed.
	ipamAlone
	// watchOnly: capscale-controller runs, but each write changes only
	// fields no preset reads (the instance ID, the ENI's MAC), so it gets
	// every event and patches no Node: its watch's cost alone.
	watchOnly
	// patchOnly: capscale-controller stopped, and the bench patches each
	// changed Node's mirrored value itself, as capscale-controller's
	// ServiceAccount and field manager: the Node patches' cost alone.
	patchOnly
	// patchUnchecked: patchOnly with the binding of capscale-controller's
	// node-writes ValidatingAdmissionPolicy taken away for the round: what
	// the policy's CEL costs kube-apiserver on each patch.
	patchUnchecked
)

func (k roundKind) String() string {
	return [...]string{"with capscale", "IPAM alone", "capscale's watch without its patches", "capscale's patches without its watch",
		"capscale's patches without its watch or its node-writes policy"}[k]
}

// stopsController says whether capscale-controller is stopped meanwhile.
func (k roundKind) stopsController() bool {
	return k == ipamAlone || k == patchOnly || k == patchUnchecked
}

// round writes rate capacity changes a second for r.length, with kind
// beside them; once capscale-controller runs again, the round ends when it
// has mirrored every change.
func (r *churnRun) round(ctx context.Context, rate int, kind roundKind, firstProbe, probes int) (_ churnRound, err error) {
	mirror := r.mirror
	if kind == watchOnly && len(r.written) == 0 {
		return churnRound{}, fmt.Errorf("a round of capscale's watch alone rewrites nodes the churn wrote before, and it wrote none yet")
	}
	label := kind.String()
	if kind == watchOnly && r.readers > 1 {
		// Started before the wait for a quiet plane, which lets their
		// first list of every object pass.
		stopReaders, err := r.startReaders(ctx, r.readers-1)
		if err != nil {
			return churnRound{}, err
		}
		defer stopReaders()
		label = fmt.Sprintf("%s, %d readers", label, r.readers)
	}
	waited, quiet, err := waitQuiet(ctx, livePids(r.s.Plane), r.idle, 2*time.Minute)
	if err != nil {
		return churnRound{}, err
	}
	reader, readerURL := sourceReader(r.s)
	pid := reader.Pid()
	if kind == withCapscale && r.variant != "" {
		label = "with capscale, " + r.variant
	}
	stopped := kind.stopsController()
	if stopped {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return churnRound{}, fmt.Errorf("stopping capscale-controller: %w", err)
		}
	}
	resume := func() error {
		if !stopped {
			return nil
		}
		stopped = false
		return syscall.Kill(pid, syscall.SIGCONT)
	}
	defer func() { _ = resume() }()
	if kind == patchUnchecked {
		restore, err := r.patcher.unbind(ctx)
		if err != nil {
			return churnRound{}, err
		}
		// A binding not back in force would leave every later round
		// without the policy: the round fails instead.
		defer func() { err = cmp.Or(err, restore()) }()
	}
	allFrom := allCPU(r.s.Plane)
	tl := startTimeline(ctx, r.s.Plane, readerURL)
	r.delivered.take() // deliveries before the round (the last drain's) are not its own
	defer tl.finish()
	costFrom, err := readCost(ctx, r.s)
	if err != nil {
		return churnRound{}, err
	}
	var (
		wg       sync.WaitGroup
		slots    = make(chan struct{}, 256) // writes in flight, so one slow write does not hold the pace
		mu       sync.Mutex
		firstErr error
		out      = churnRound{waited: waited, quiet: quiet}
	)
	put := func(p *pending, key, node string, capacity int, k int, tk ticket) {
		defer wg.Done()
		defer func() { <-slots }()
		obj := ipamtest.CiliumNodeENI(node, r.uids[node], capacity+2, nil)
		if kind == watchOnly {
			unreadChange(obj, k)
		}
		err := tk.wait(ctx)
		t := time.Now()
		if err == nil {
			err = r.w.put(ctx, obj)
		}
		tk.done()
		mu.Lock()
		out.writes = append(out.writes, float64(time.Since(t))/float64(time.Millisecond))
		firstErr = cmp.Or(firstErr, err)
		mu.Unlock()
		if err != nil {
			return
		}
		r.delivered.written(node, r.w.version(node))
		if kind == patchOnly || kind == patchUnchecked {
			if err := r.patcher.patch(ctx, node, capacity); err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
				return
			}
		}
		p.written(key)
	}
	writeFrom := allCPU(r.s.Plane)
	start := time.Now()
	changes := int(r.length.Seconds() * float64(rate))
	profiled := r.prof.start(ctx, fmt.Sprintf("%d-%s", rate, label), r.length-time.Second)
	defer profiled()
	every := r.length / time.Duration(max(probes, 1))
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	probed := 0
	for range changes {
		<-tick.C
		k := r.next
		r.next++
		node, capacity := r.change(kind, k)
		if kind != watchOnly && r.variant != noMirror {
			mirror.expect(node, strconv.Itoa(capacity))
		}
		slots <- struct{}{}
		wg.Add(1)
		go put(mirror, node, node, capacity, k, r.w.line(node))
		if probed < probes && time.Since(start) >= time.Duration(probed)*every+every/2 {
			j := firstProbe + probed
			r.bound.expect(probeName(j), "bound")
			slots <- struct{}{}
			wg.Add(1)
			go put(r.bound, probeName(j), r.probe(j), 1, k, r.w.line(r.probe(j)))
			probed++
		}
	}
	wg.Wait()
	if firstErr != nil {
		return churnRound{}, firstErr
	}
	out.writingMs = cpuMsPerPod(writeFrom, allCPU(r.s.Plane), time.Since(start), r.idle, 1)
	costTo, err := readCost(ctx, r.s)
	if err != nil {
		return churnRound{}, err
	}
	out.cost = costTo.rates(costFrom, time.Since(start))
	out.achieved = float64(changes) / time.Since(start).Seconds()
	out.changes = changes
	if err := resume(); err != nil {
		return churnRound{}, fmt.Errorf("resuming capscale-controller: %w", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return mirror.open() == 0 && r.bound.open() == 0, nil
	}); err != nil {
		return churnRound{}, fmt.Errorf("after the round at %d/s %d changes were never mirrored and %d probe pods never bound", rate, mirror.open(), r.bound.open())
	}
	out.cpuMs = cpuMsPerPod(allFrom, allCPU(r.s.Plane), 0, nil, 1) // idle not subtracted: the drain's length varies
	out.controllerCPUms = out.cpuMs[reader.Name]
	drained, err := readCost(ctx, r.s)
	if err != nil {
		return churnRound{}, err
	}
	lags, binds, delivered := r.mirror.done(), r.bound.done(), r.delivered.take()
	out.delivered = lagsOf(delivered)
	if kind == withCapscale {
		out.lag, out.bind = lagsOf(lags), lagsOf(binds)
	}
	r.mirror.reset()
	r.bound.reset()
	fmt.Printf("# churn %d/s, %s, to the end of the drain: %s\n# by 5 s: %s\n",
		rate, label, drained.slowParts(costFrom), windows(tl.finish(), lags, delivered, binds, 5*time.Second))
	fmt.Printf("churn %d/s, %s (after %.0f s waiting for a quiet plane, quiet %v): %d changes at %.1f/s, each CiliumNode write %s; to a watch %s; object to mirrored value %s; %d probes bound %s; kube-apiserver %.0f requests/s, Node PATCH %.1f/s, Node watch %.0f KiB/s; controller CPU %.0f ms to the end of the drain; CPU per change: %s; while writing, above idle: %s\n",
		rate, label, waited.Seconds(), quiet, changes, out.achieved, quantiles(out.writes), quantiles(out.delivered), quantiles(out.lag), len(out.bind), quantiles(out.bind),
		out.cost.requests, out.cost.nodePatches, out.cost.nodeWatchBytes/1024, out.controllerCPUms, perChange(out.cpuMs, changes), perChange(out.writingMs, changes))
	return out, nil
}

// change is the k-th change's node and capacity. Spread over the nodes,
// each pass over the span gives a node a value its previous pass did
// not; a watchOnly round rewrites a node the churn wrote before with the
// value it gave it, so that nothing the mirror reads changes.
func (r *churnRun) change(kind roundKind, k int) (string, int) {
	if kind == watchOnly {
		node := r.written[k%len(r.written)]
		return node, r.last[node]
	}
	node := plane.NodeName((k * 7919) % r.span)
	capacity := 20 + (k/r.span)%5
	if _, ok := r.last[node]; !ok {
		r.written = append(r.written, node)
	}
	r.last[node] = capacity
	return node, capacity
}

// unreadChange changes fields of a CiliumNode that no preset reads, in
// its spec and in its status, so that both of the IPAM's writes are real
// writes that leave the mirrored value as it was.
func unreadChange(obj *unstructured.Unstructured, k int) {
	_ = unstructured.SetNestedField(obj.Object, fmt.Sprintf("i-%017x", k), "spec", "instance-id")
	_ = unstructured.SetNestedField(obj.Object, fmt.Sprintf("0a:1b:%02x:%02x:%02x:%02x", byte(k>>24), byte(k>>16), byte(k>>8), byte(k)),
		"status", "eni", "enis", ipamtest.ENIName, "mac")
}

// perChange is each process's CPU per change, largest first.
func perChange(cpuMs map[string]float64, changes int) string {
	names := make([]string, 0, len(cpuMs))
	for n := range cpuMs {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return cpuMs[names[i]] > cpuMs[names[j]] })
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f ms", n, cpuMs[n]/float64(max(changes, 1))))
	}
	return strings.Join(parts, ", ")
}

func quantiles(xs []float64) string {
	if len(xs) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f / %.0f ms (max %.0f ms)", quantileOf(xs, 0.5), quantileOf(xs, 0.99), quantileOf(xs, 1))
}

// churnRows are one rate's rows for BENCHMARKS.md.
func churnRows(nodes, rate int, label string, alone, with churnRound, idle apiserverCost) []row {
	what := fmt.Sprintf("Capacity source at %d nodes, %d capacity changes a second (the IPAM writing as cilium-operator%s)", nodes, rate, label)
	goal := ""
	if rate >= 50 {
		goal = "p99 ≤ 1 s"
	}
	return []row{
		{Measure: fmt.Sprintf("%s: IPAM object change to the Node's mirrored value, p50 / p99 (%d changes)", what, len(with.lag)), Figure: quantiles(with.lag),
			Spread: "of which kube-apiserver's delivery of the change to a watch: " + quantiles(with.delivered)},
		{Measure: fmt.Sprintf("%s: IPAM object change to the waiting pod bound, p50 / p99 (%d probes)", what, len(with.bind)), Figure: quantiles(with.bind), Goal: goal},
		{Measure: what + ": the IPAM's own CiliumNode write (spec and status), p50, alone / with capscale mirroring",
			Figure: fmt.Sprintf("%.0f / %.0f ms", quantileOf(alone.writes, 0.5), quantileOf(with.writes, 0.5)),
			Spread: fmt.Sprintf("p99 %.0f / %.0f ms; achieved %.1f / %.1f changes a second", quantileOf(alone.writes, 0.99), quantileOf(with.writes, 0.99), alone.achieved, with.achieved)},
		{Measure: what + ": kube-apiserver requests a second, idle / IPAM alone / with capscale",
			Figure: fmt.Sprintf("%.0f / %.0f / %.0f", idle.requests, alone.cost.requests, with.cost.requests),
			Spread: fmt.Sprintf("Node PATCH %.1f a second with capscale", with.cost.nodePatches)},
		{Measure: what + ": Node watch events sent by kube-apiserver, idle / IPAM alone / with capscale",
			Figure: fmt.Sprintf("%.0f / %.0f / %.0f KiB/s", idle.nodeWatchBytes/1024, alone.cost.nodeWatchBytes/1024, with.cost.nodeWatchBytes/1024)},
		{Measure: what + ": CPU per capacity change of the process that reads the sources (capscale-controller, or the extender where its publisher reads them), its Node patch included",
			Figure: fmt.Sprintf("%.0f µs", with.controllerCPUms*1000/float64(max(len(with.lag), 1)))},
		{Measure: what + ": the plane's CPU per capacity change (every process, to the end of the drain), IPAM alone / with capscale",
			Figure: fmt.Sprintf("%.1f / %.1f ms", alone.perChangeMs(total(alone.cpuMs)), with.perChangeMs(total(with.cpuMs))),
			Spread: fmt.Sprintf("kube-apiserver %.1f / %.1f, etcd %.1f / %.1f ms; rounds started after %.0f / %.0f s waiting for a quiet plane",
				alone.perChangeMs(alone.cpuMs["kube-apiserver"]), with.perChangeMs(with.cpuMs["kube-apiserver"]),
				alone.perChangeMs(alone.cpuMs["etcd"]), with.perChangeMs(with.cpuMs["etcd"]),
				alone.waited.Seconds(), with.waited.Seconds())},
	}
}

// sourceReader is the process that reads the capacity sources and writes
// the Nodes, and its /metrics URL: capscale-controller's mirror, or native
// mode's publisher where it reads them itself.
func sourceReader(s *stack.Stack) (*plane.Process, string) {
	if s.PublisherReadsSources() {
		return s.Extender, s.ExtenderURL
	}
	return s.Controller.Process, s.Controller.URL
}
