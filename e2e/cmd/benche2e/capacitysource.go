package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
	"github.com/capscale/capscale/e2e/ipamcrd"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// The capacity-source scenario (issue 43): how long an IPAM object's change
// takes to become the capacity every mode uses, and what a source costs
// capscale-controller at scale. The source is the cilium-eni preset on
// Cilium's own CRD (e2e/ipamcrd), its objects shaped as cilium-operator and
// cilium-agent write them (ipamtest).

var ciliumNodes = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"}

const ciliumSources = "sources: [{name: cilium, preset: cilium-eni, nodeSelector: {matchLabels: {type: kwok}}}]"

// capacitySourceBench runs the lag part in each of modes, then the cost
// part at costNodes nodes (0 skips it).
func capacitySourceBench(ctx context.Context, modes string, changes, costNodes, costEvents int, churn churnOptions, binDir string, nodeLease time.Duration) error {
	run := thisRun(time.Now(), loadAverage())
	var rows []row
	for _, m := range strings.Split(modes, ",") {
		if strings.TrimSpace(m) == "" {
			continue // --capacity-modes= runs the cost part alone
		}
		lag, err := sourceLag(ctx, strings.TrimSpace(m), changes, binDir)
		if err != nil {
			return fmt.Errorf("%s mode: %w", m, err)
		}
		rows = append(rows, lag...)
	}
	if costNodes > 0 {
		churn.nodes = costNodes
		cost, err := sourceCost(ctx, costNodes, costEvents, churn, binDir, nodeLease)
		if err != nil {
			return err
		}
		rows = append(rows, cost...)
	}
	printRows(rows, run)
	return nil
}

// putCiliumNode creates or replaces a CiliumNode, spec then status.
func putCiliumNode(ctx context.Context, dyn dynamic.Interface, obj *unstructured.Unstructured) error {
	return ipamcrd.Put(ctx, dyn, ciliumNodes, obj)
}

// installCilium installs the CiliumNode CRD from Cilium's module.
func installCilium(ctx context.Context, s *stack.Stack) error {
	file, err := ipamcrd.CiliumNode.File(ctx)
	if err != nil {
		return err
	}
	if _, err := s.Kubectl(ctx, "apply", "--server-side", "-f", file); err != nil {
		return err
	}
	fmt.Printf("# installed %s from %s@%s %s\n", ipamcrd.CiliumNode.Name, ipamcrd.CiliumNode.Module, ipamcrd.CiliumNode.Version, ipamcrd.CiliumNode.Path)
	_, err = s.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+ipamcrd.CiliumNode.Name)
	return err
}

// times records when each watched thing was first seen in a state.
type times struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (t *times) mark(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.seen[key]; !ok {
		t.seen[key] = time.Now()
	}
}

func (t *times) at(key string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.seen[key]
	return v, ok
}

// sourceLag: one node covered by the source, its CiliumNode giving c IPs, c
// underlay pods bound and one waiting. Each change raises the object to
// c+1 at a random moment; the time to the Node's mirrored value (the
// mirror), to its published allocatable (native mode's publisher) and to
// the waiting pod bound (the mode acting on it) are read from watches.
func sourceLag(ctx context.Context, mode string, changes int, binDir string) ([]row, error) {
	o := stack.Options{BinDir: binDir, Plane: plane.Options{BinDir: binDir, Nodes: 1,
		Logf: func(f string, a ...any) { fmt.Printf("# "+f+"\n", a...) }}}
	switch mode {
	case "plugin":
		o.Plugin = true
	case "extender":
		o.Extender = true
	case "native":
		o.Native = true
	default:
		return nil, fmt.Errorf("--capacity-modes: %q is not extender, native or plugin", mode)
	}
	o.CapacitySources = ciliumSources
	o.Prepare = installCilium
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, o)
	if err != nil {
		return nil, err
	}
	defer s.Stop()
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		return nil, err
	}
	node := plane.NodeName(0)
	n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	uid := n.UID

	seen := &times{seen: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactory(s.Client, 0)
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) {
			n := cur.(*corev1.Node)
			seen.mark("value=" + n.Annotations[names.UnderlayIPSourceCapacityAnnotation])
			if q, ok := n.Status.Allocatable[names.UnderlayIPResource]; ok {
				seen.mark("published=" + q.String())
			}
		},
	})
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) {
			if p := cur.(*corev1.Pod); p.Spec.NodeName != "" {
				seen.mark("bound=" + p.Name)
			}
		},
	})
	// Shutdown waits for the informers, which stop only when their channel
	// closes: close it first (the deferred cancel above runs too late).
	informersCtx, stopInformers := context.WithCancel(ctx)
	factory.Start(informersCtx.Done())
	defer func() { stopInformers(); factory.Shutdown() }()
	factory.WaitForCacheSync(ctx.Done())

	const ns = "lag"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		return nil, err
	}
	// c IPs, c bound, one waiting; the agent's router and health IPs come
	// out of the pool too.
	setCapacity := func(c int) error { return putCiliumNode(ctx, dyn, ipamtest.CiliumNodeENI(node, uid, c+2, nil)) }
	if err := setCapacity(0); err != nil {
		return nil, err
	}
	pod := func(i int) error {
		p := benchUnderlayPod(ns, fmt.Sprintf("p-%03d", i))
		_, err := s.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	waitRejected := func(name string) error {
		return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					return true, nil
				}
			}
			return false, nil
		})
	}
	var mirror, published, bound []float64
	fmt.Printf("change\tmirrored_ms\tpublished_ms\tbound_ms\n")
	for i := range changes {
		if err := pod(i); err != nil {
			return nil, err
		}
		if err := waitRejected(fmt.Sprintf("p-%03d", i)); err != nil {
			return nil, fmt.Errorf("pod %d never waited: %w", i, err)
		}
		// A random moment, so that changes land anywhere in the components'
		// cycles (the extender's requeue bucket, kube-scheduler's backoff).
		time.Sleep(time.Duration(rand.Int64N(int64(time.Second))))
		t0 := time.Now()
		if err := setCapacity(i + 1); err != nil {
			return nil, err
		}
		want := []string{"value=" + strconv.Itoa(i+1), fmt.Sprintf("bound=p-%03d", i)}
		if mode == "native" {
			want = append(want, "published="+strconv.Itoa(i+1))
		}
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			for _, k := range want {
				if _, ok := seen.at(k); !ok {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			return nil, fmt.Errorf("change %d: %v not all seen within a minute", i, want)
		}
		since := func(k string) float64 { at, _ := seen.at(k); return float64(at.Sub(t0)) / float64(time.Millisecond) }
		mirror = append(mirror, since(want[0]))
		bound = append(bound, since(want[1]))
		line := fmt.Sprintf("%d\t%.0f\t", i, mirror[len(mirror)-1])
		if mode == "native" {
			published = append(published, since(want[2]))
			line += fmt.Sprintf("%.0f", published[len(published)-1])
		} else {
			line += "-"
		}
		fmt.Printf("%s\t%.0f\n", line, bound[len(bound)-1])
	}
	q := func(xs []float64) (p50, p99, hi float64) {
		return quantileOf(xs, 0.5), quantileOf(xs, 0.99), quantileOf(xs, 1)
	}
	m50, m99, mmax := q(mirror)
	b50, b99, bmax := q(bound)
	fmt.Printf("%s mode over %d changes: object to mirrored value p50 %.0f ms p99 %.0f ms max %.0f; to the waiting pod bound p50 %.0f ms p99 %.0f ms max %.0f\n",
		mode, changes, m50, m99, mmax, b50, b99, bmax)
	rows := []row{
		{Measure: fmt.Sprintf("Capacity source, %s mode: IPAM object change to the Node's mirrored value, p50 / p99 (%d changes)", mode, changes),
			Figure: fmt.Sprintf("%.0f / %.0f ms (max %.0f ms)", m50, m99, mmax)},
		{Measure: fmt.Sprintf("Capacity source, %s mode: IPAM object change to the waiting pod bound, p50 / p99 (%d changes)", mode, changes),
			Figure: fmt.Sprintf("%.0f / %.0f ms (max %.0f ms)", b50, b99, bmax), Goal: "≤ 5 s every time"},
	}
	if mode == "native" {
		p50, p99, pmax := q(published)
		rows = append(rows, row{Measure: fmt.Sprintf("Capacity source, native mode: IPAM object change to the published allocatable, p50 / p99 (%d changes)", changes),
			Figure: fmt.Sprintf("%.0f / %.0f ms (max %.0f ms)", p50, p99, pmax)})
	}
	return rows, nil
}

// quantileOf is the q-quantile of xs (nearest rank).
func quantileOf(xs []float64, q float64) float64 {
	d := make([]time.Duration, len(xs))
	for i, x := range xs {
		d[i] = time.Duration(x * float64(time.Millisecond))
	}
	return float64(percentile(d, q)) / float64(time.Millisecond)
}

func benchUnderlayPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/capscale/fake:1",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{names.UnderlayIPResource: *resource.NewQuantity(1, resource.DecimalSI)}}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// prepareCilium readies a plane for the mirror's cost: Cilium's CRD, the
// policy the chart holds the mirror's Node writes to (kube-apiserver
// evaluates it on every patch), and a CiliumNode for each of the first
// nodes nodes (none for 0).
func prepareCilium(nodes int) func(context.Context, *stack.Stack) error {
	return func(ctx context.Context, s *stack.Stack) error {
		if err := installCilium(ctx, s); err != nil {
			return err
		}
		if out, err := s.Kubectl(ctx, "apply", "-f", stack.DeployFile("controller/node-writes.yaml")); err != nil {
			return fmt.Errorf("applying controller/node-writes.yaml: %w\n%s", err, out)
		}
		if nodes == 0 {
			return nil
		}
		return createCiliumNodes(ctx, s, nodes)
	}
}

// sourceCost: nodes kwok nodes, a CiliumNode each, capscale-controller with
// the source beside one without (the ElasticWeb controller alone), both
// leading nothing but their own controllers (--leader-elect=false). It
// reports the time to mirror every node at the controller's default
// --kube-api-qps, the RSS of each process, and the controller's CPU per
// object change: events that move no capacity (an IP used or released, the
// common case) and events that do (a Node patch each).
func sourceCost(ctx context.Context, nodes, events int, churn churnOptions, binDir string, nodeLease time.Duration) ([]row, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Minute)
	defer cancel()
	start := time.Now()
	var apiFlags []string
	if churn.profiles != "" {
		apiFlags = []string{"--profiling=true"} // the plane's default is off
	}
	o := stack.Options{
		BinDir: binDir,
		Plane: plane.Options{BinDir: binDir, Nodes: nodes, NodeLeaseDuration: nodeLease, ExtraAPIServerFlags: apiFlags,
			Logf: func(f string, a ...any) { fmt.Printf("# "+f+"\n", a...) }},
		CapacitySources: ciliumSources,
		ControllerArgs:  []string{"--leader-elect=false"},
	}
	switch churn.mode {
	case "plugin":
		o.Plugin = true
	case "plugin-reads":
		// The plugin reads the sources itself; the mirror writes every
		// Node at once on the start (the burst), then 10 a second for
		// the readers of Nodes (kubectl capscale ips, the workload API).
		o.Plugin, o.SchedulerReadsSources = true, true
		o.ControllerArgs = append(o.ControllerArgs, "--capacity-source-qps=10", "--capacity-source-burst=5000")
	case "extender":
		o.Extender = true
	case "extender-reads":
		// The extender reads the sources itself; the mirror as in
		// plugin-reads, for the readers of Nodes.
		o.Extender, o.SchedulerReadsSources = true, true
		o.ControllerArgs = append(o.ControllerArgs, "--capacity-source-qps=10", "--capacity-source-burst=5000")
	case "native":
		// As the chart's default renders it: the extender's publisher
		// reads the sources itself and writes each change's capacity and
		// mirror in one Node status patch; no capscale-controller runs.
		// The stock kube-scheduler counts the capacity, and its
		// NodeResourcesFit hint wakes the pod the change fits.
		o.Native = true
	case "native-mirror":
		// capscale-controller mirrors, the publisher publishes the
		// mirrored value: two Node writes a change (publisherReads: false).
		o.Native, o.NativeMirror = true, true
	default:
		return nil, fmt.Errorf("--source-cost-mode: %q is not plugin, plugin-reads, extender, extender-reads, native or native-mirror", churn.mode)
	}
	// When the extender starts, every CiliumNode is in place: a fresh
	// install's first read, timed from here where the publisher reads.
	var prepared time.Time
	o.Prepare = func(ctx context.Context, s *stack.Stack) error {
		if err := prepareCilium(nodes)(ctx, s); err != nil {
			return err
		}
		prepared = time.Now()
		return nil
	}
	s, err := stack.Start(ctx, o)
	if err != nil {
		return nil, err
	}
	defer s.Stop()
	fmt.Printf("# %s mode: plane with %d nodes and %d CiliumNodes, capscale ready in %.1fs\n", churn.mode, nodes, nodes, time.Since(start).Seconds())
	if s.PublisherReadsSources() {
		return publisherReadsCost(ctx, s, nodes, prepared, churn)
	}
	base, err := s.StartController(ctx, "controller-baseline", "--leader-elect=false", "--capacity-sources=")
	if err != nil {
		return nil, err
	}
	// Every node mirrored: the first pass patches each once.
	t0 := time.Now()
	if err := waitAllMirrored(ctx, s.Client, nodes, func(v string) bool { return v == "10" }); err != nil {
		return nil, err
	}
	mirrorAll := time.Since(t0)
	fmt.Printf("# every node mirrored %.1fs after the controller was ready\n", mirrorAll.Seconds())
	var schedRows []row
	if churn.mode == "native" {
		// What a fresh install's pods wait on in native mode is the
		// publisher's write of each Node's status, after the mirror's.
		if err := waitAllPublished(ctx, s.Client, nodes, 10); err != nil {
			return nil, err
		}
		published := time.Since(t0)
		fmt.Printf("# every node published %.1fs after the controller was ready\n", published.Seconds())
		schedRows = append(schedRows, row{Measure: fmt.Sprintf("Capacity source at %d nodes, native mode: every Node's allocatable published after capscale-controller's start (the publisher's default --publish-qps 200, --publish-workers 16)", nodes),
			Figure: fmt.Sprintf("%.0f s", published.Seconds())})
	}
	time.Sleep(10 * time.Second)
	withRSS, baseRSS := rss(s.Controller.Pid()), rss(base.Pid())
	fmt.Printf("controller with the source: %s\tcontroller without: %s\n", withRSS, baseRSS)
	// What a fresh install's pods wait on where the scheduler (plugin
	// mode) or the extender reads the sources is that reader's own first
	// read, not the mirror: restarted with every CiliumNode in place, as
	// on an install's first start.
	var fresh func() (time.Duration, error)
	var reader string
	switch churn.mode {
	case "plugin-reads":
		fresh, reader = func() (time.Duration, error) { return schedulerFreshRead(ctx, s.Plane) }, "capscale-scheduler"
	case "extender-reads":
		fresh, reader = func() (time.Duration, error) { return extenderFreshRead(ctx, s) }, "extender mode's extender"
	}
	if fresh != nil {
		read, err := fresh()
		if err != nil {
			return nil, err
		}
		fmt.Printf("# %s restarted: every node read %.1fs after its start\n", reader, read.Seconds())
		time.Sleep(10 * time.Second)
		schedRows = append(schedRows, row{Measure: fmt.Sprintf("Capacity source at %d nodes: %s reading the sources itself, every node read after its start", nodes, reader),
			Figure: fmt.Sprintf("%.1f s", read.Seconds())})
	}
	if sched := s.Plane.Scheduler(); sched != nil && strings.HasPrefix(churn.mode, "plugin") {
		r := rss(sched.Pid())
		fmt.Printf("capscale-scheduler (%s): %s\n", churn.mode, r)
		schedRows = append(schedRows, row{Measure: fmt.Sprintf("Capacity source at %d nodes: capscale-scheduler RSS (%s)", nodes, churn.mode), Figure: strings.Fields(r)[1] + " MiB"})
	}

	dyn, err := clientsFor(s)
	if err != nil {
		return nil, err
	}
	uids, err := nodeUIDs(ctx, s.Client)
	if err != nil {
		return nil, err
	}
	// CPU per event: the same number of object writes, first moving no
	// capacity (a pod's IP used: status.ipam.used changes), then moving it.
	measure := func(label string, capacity func(i int) int, pods func(i int) []string, wantValue string) (float64, error) {
		before, err := procCPU(s.Controller.Pid())
		if err != nil {
			return 0, err
		}
		baseBefore, _ := procCPU(base.Pid())
		t := time.Now()
		if err := parallel(ctx, 16, events, func(i int) error {
			node := plane.NodeName(i % nodes)
			return putCiliumNode(ctx, dyn, ipamtest.CiliumNodeENI(node, uids[node], capacity(i)+2, pods(i)))
		}); err != nil {
			return 0, err
		}
		if wantValue != "" {
			if err := waitAllMirrored(ctx, s.Client, min(nodes, events), func(v string) bool { return v == wantValue }); err != nil {
				return 0, err
			}
		}
		time.Sleep(5 * time.Second)
		after, err := procCPU(s.Controller.Pid())
		if err != nil {
			return 0, err
		}
		baseAfter, _ := procCPU(base.Pid())
		wall := time.Since(t)
		// The baseline's CPU over the same window is what the process costs
		// anyway (its other informers, GC, leader-less idling).
		perEvent := float64(after-before-(baseAfter-baseBefore)) / float64(time.Microsecond) / float64(events)
		fmt.Printf("%s: %d object writes in %.1fs, controller CPU %.0f ms (baseline %.0f ms): %.0f µs per event\n",
			label, events, wall.Seconds(), float64(after-before)/float64(time.Millisecond), float64(baseAfter-baseBefore)/float64(time.Millisecond), perEvent)
		return perEvent, nil
	}
	noop, err := measure("events moving no capacity", func(int) int { return 10 }, func(i int) []string { return []string{fmt.Sprintf("shop/web-%d", i)} }, "")
	if err != nil {
		return nil, err
	}
	moving, err := measure("events moving the capacity", func(int) int { return 11 }, func(int) []string { return nil }, "11")
	if err != nil {
		return nil, err
	}
	var churnRows []row
	if len(churn.rates) > 0 {
		if churnRows, err = sourceChurn(ctx, s, uids, churn); err != nil {
			return nil, err
		}
	}
	rssMiB := func(s string) string { f := strings.Fields(s); return f[1] + " MiB" }
	return append([]row{
		{Measure: fmt.Sprintf("Capacity source at %d nodes: every Node mirrored after capscale-controller's start (default --capacity-source-qps 200, --capacity-source-workers 16)", nodes),
			Figure: fmt.Sprintf("%.0f s", mirrorAll.Seconds())},
		{Measure: fmt.Sprintf("Capacity source at %d nodes: capscale-controller RSS with the source / without", nodes),
			Figure: rssMiB(withRSS) + " / " + rssMiB(baseRSS)},
		{Measure: fmt.Sprintf("Capacity source at %d nodes: controller CPU per object change that moves no capacity (%d changes)", nodes, events),
			Figure: fmt.Sprintf("%.0f µs", noop)},
		{Measure: fmt.Sprintf("Capacity source at %d nodes: controller CPU per object change that moves the capacity, its Node patch included (%d changes)", nodes, events),
			Figure: fmt.Sprintf("%.0f µs", moving)},
	}, append(schedRows, churnRows...)...), nil
}

// publisherReadsCost is sourceCost where native mode's publisher reads the
// sources itself: a fresh install's time to every Node's allocatable,
// from the extender's start with every CiliumNode in place (started), then
// the churn. No capscale-controller runs, so the mirror's own costs are
// not measured.
func publisherReadsCost(ctx context.Context, s *stack.Stack, nodes int, started time.Time, churn churnOptions) ([]row, error) {
	if err := waitAllPublished(ctx, s.Client, nodes, 10); err != nil {
		return nil, err
	}
	published := time.Since(started)
	fmt.Printf("# every node published %.1fs after the extender's start\n", published.Seconds())
	if err := waitAllMirrored(ctx, s.Client, nodes, func(v string) bool { return v == "10" }); err != nil {
		return nil, err
	}
	r := rss(s.Extender.Pid())
	fmt.Printf("extender reading the sources: %s\n", r)
	rows := []row{
		{Measure: fmt.Sprintf("Capacity source at %d nodes, native mode with the publisher reading the sources (the chart's default): every Node's allocatable published after the extender's start (--publish-qps 200, --publish-workers 16)", nodes),
			Figure: fmt.Sprintf("%.1f s", published.Seconds())},
	}
	if f := strings.Fields(r); len(f) > 1 {
		rows = append(rows, row{Measure: fmt.Sprintf("Capacity source at %d nodes: extender RSS with the publisher reading the sources", nodes), Figure: f[1] + " MiB"})
	}
	if len(churn.rates) == 0 {
		return rows, nil
	}
	uids, err := nodeUIDs(ctx, s.Client)
	if err != nil {
		return nil, err
	}
	churnRows, err := sourceChurn(ctx, s, uids, churn)
	if err != nil {
		return nil, err
	}
	return append(rows, churnRows...), nil
}

// extenderFreshRead restarts the extender, which reads the sources itself,
// and returns how long after its start it logged that it had read every
// node.
func extenderFreshRead(ctx context.Context, s *stack.Stack) (time.Duration, error) {
	return firstRead(ctx, "the extender", s.Extender, func() (*plane.Process, error) {
		if err := s.StartExtender(ctx); err != nil {
			return nil, err
		}
		return s.Extender, nil
	})
}

// schedulerFreshRead restarts the plane's scheduler (capscale-scheduler
// with capacitySources) and returns how long after its start it logged
// that it had read every node.
func schedulerFreshRead(ctx context.Context, p *plane.Plane) (time.Duration, error) {
	config, ok := p.RunningSchedulerConfig()
	old := p.Scheduler()
	if !ok || old == nil {
		return 0, fmt.Errorf("no scheduler running")
	}
	return firstRead(ctx, "capscale-scheduler", old, func() (*plane.Process, error) {
		if err := p.RestartScheduler(ctx, config); err != nil {
			return nil, err
		}
		if sched := p.Scheduler(); sched != nil {
			return sched, nil
		}
		return nil, fmt.Errorf("the scheduler did not come back")
	})
}

// firstRead stops old and starts its process again (start; the new one
// appends to the same log), and returns how long after its start the new
// one logged that it had read every node: one line more.
func firstRead(ctx context.Context, who string, old *plane.Process, start func() (*plane.Process, error)) (time.Duration, error) {
	const line = "Capacity sources read"
	before := 0
	if b, err := os.ReadFile(old.LogFile); err == nil {
		before = strings.Count(string(b), line)
	}
	old.Stop(5 * time.Second)
	started := time.Now()
	proc, err := start()
	if err != nil {
		return 0, err
	}
	for time.Since(started) < 5*time.Minute {
		if b, err := os.ReadFile(proc.LogFile); err == nil && strings.Count(string(b), line) > before {
			return time.Since(started), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("%s logged no first read of the sources within 5m:\n%s", who, proc.Tail(20))
}

func clientsFor(s *stack.Stack) (dynamic.Interface, error) {
	cfg := rest.CopyConfig(s.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	return dynamic.NewForConfig(cfg)
}

func createCiliumNodes(ctx context.Context, s *stack.Stack, nodes int) error {
	dyn, err := clientsFor(s)
	if err != nil {
		return err
	}
	uids, err := nodeUIDs(ctx, s.Client)
	if err != nil {
		return err
	}
	return parallel(ctx, 16, nodes, func(i int) error {
		node := plane.NodeName(i)
		return putCiliumNode(ctx, dyn, ipamtest.CiliumNodeENI(node, uids[node], 12, nil))
	})
}

func nodeUIDs(ctx context.Context, c kubernetes.Interface) (map[string]types.UID, error) {
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]types.UID, len(list.Items))
	for _, n := range list.Items {
		out[n.Name] = n.UID
	}
	return out, nil
}

// waitAllMirrored waits until the first n kwok nodes' mirrored value
// satisfies ok. It reads a Node informer's cache, not a LIST a second: at
// 5000 nodes that LIST is ~20 MB of kube-apiserver's serializing, on the
// plane whose speed is being measured.
func waitAllMirrored(ctx context.Context, c kubernetes.Interface, n int, ok func(string) bool) error {
	return waitAllNodes(ctx, c, n, func(node *corev1.Node) bool { return ok(node.Annotations[names.UnderlayIPSourceCapacityAnnotation]) })
}

// waitAllPublished waits until the first n kwok nodes publish want as
// allocatable (native mode): what kube-scheduler counts, not the mirror.
func waitAllPublished(ctx context.Context, c kubernetes.Interface, n int, want int64) error {
	return waitAllNodes(ctx, c, n, func(node *corev1.Node) bool {
		q, ok := node.Status.Allocatable[names.UnderlayIPResource]
		return ok && q.Value() == want
	})
}

// waitAllNodes waits until ok holds for each of the first n kwok nodes, as
// a Node informer sees them.
func waitAllNodes(ctx context.Context, c kubernetes.Interface, n int, ok func(*corev1.Node) bool) error {
	factory := informers.NewSharedInformerFactory(c, 0)
	nodes := factory.Core().V1().Nodes()
	inf := nodes.Informer()
	informersCtx, stop := context.WithCancel(ctx)
	factory.Start(informersCtx.Done())
	defer func() { stop(); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("the Node informer never synced: %w", ctx.Err())
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Minute, true, func(context.Context) (bool, error) {
		for i := range n {
			node, err := nodes.Lister().Get(plane.NodeName(i))
			if err != nil || !ok(node) {
				return false, nil
			}
		}
		return true, nil
	})
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, workers, n int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
