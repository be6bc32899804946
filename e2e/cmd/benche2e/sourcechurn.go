package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// churnOptions is the churn part of the capacity-source cost (issue 55 §6):
// rate capacity changes a second across the nodes for a while, and probes
// nodes with a pod waiting for the capacity that one of the changes brings.
type churnOptions struct {
	nodes, rate, probes int
	length              time.Duration
}

// pending is when each awaited state's change was written, and how long
// it took to be seen. The clock starts when the IPAM's write returns to
// its writer (the bench), not when it is sent: on a loaded plane the write
// itself takes hundreds of milliseconds, none of them capscale's. A state
// seen before its write returned counts 0.
type pending struct {
	mu      sync.Mutex
	want    map[string]pendingChange // by node (mirror) or pod (bound)
	latency []float64
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
		p.latency = append(p.latency, 0)
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
		p.latency = append(p.latency, float64(time.Since(w.at))/float64(time.Millisecond))
		delete(p.want, key)
	}
}

func (p *pending) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.want)
}

func (p *pending) done() []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]float64(nil), p.latency...)
}

// apiserverCost is a window's Node writes, requests and Node watch bytes.
type apiserverCost struct {
	nodePatches, requests, nodeWatchBytes float64
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
	if fam, ok := f["apiserver_watch_events_sizes"]; ok {
		for _, m := range fam.GetMetric() {
			if labelsMatch(m, map[string]string{"resource": "nodes"}) && m.GetHistogram() != nil {
				c.nodeWatchBytes += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return c, nil
}

func (c apiserverCost) rates(since apiserverCost, d time.Duration) apiserverCost {
	s := d.Seconds()
	return apiserverCost{
		nodePatches:    (c.nodePatches - since.nodePatches) / s,
		requests:       (c.requests - since.requests) / s,
		nodeWatchBytes: (c.nodeWatchBytes - since.nodeWatchBytes) / s,
	}
}

// sourceChurn runs the churn on a stack whose nodes are all mirrored: the
// last o.probes nodes each get a pod that waits at capacity 0, the others
// take o.rate changes a second. Every o.length/o.probes one probe node's
// capacity goes to 1. It reports the object-to-Node lag of every change,
// the object-to-bound lag of every probe, and kube-apiserver's cost beside
// an idle window of the same length.
func sourceChurn(ctx context.Context, s *stack.Stack, dyn dynamic.Interface, uids map[string]types.UID, o churnOptions) ([]row, error) {
	span := o.nodes - o.probes
	if span < 1 || o.rate < 1 || o.probes < 1 || o.length < time.Second {
		return nil, fmt.Errorf("churn: %d nodes, %d probes, %d changes a second for %s: want a node left to change, a probe, a change a second and a second", o.nodes, o.probes, o.rate, o.length)
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
	informersCtx, stop := context.WithCancel(ctx)
	factory.Start(informersCtx.Done())
	defer func() { stop(); factory.Shutdown() }()
	factory.WaitForCacheSync(ctx.Done())

	// The probes: capacity 0, then a pod each that waits on its node.
	const ns = "churn"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		return nil, err
	}
	probe := func(j int) string { return plane.NodeName(span + j) }
	for j := range o.probes {
		if err := putCiliumNode(ctx, dyn, ipamtest.CiliumNodeENI(probe(j), uids[probe(j)], 2, nil)); err != nil {
			return nil, err
		}
	}
	for j := range o.probes {
		node := probe(j)
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			return err == nil && n.Annotations[names.UnderlayIPSourceCapacityAnnotation] == "0", nil
		}); err != nil {
			return nil, fmt.Errorf("probe node %s never mirrored 0: %w", node, err)
		}
		p := benchUnderlayPod(ns, fmt.Sprintf("probe-%03d", j))
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		if _, err := s.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	for j := range o.probes {
		name := fmt.Sprintf("probe-%03d", j)
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Spec.NodeName != "" {
				return false, err
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return nil, fmt.Errorf("probe pod %s never waited: %w", name, err)
		}
	}

	// An idle window first, as long as the churn, for what the plane costs
	// anyway (kwok's Leases, the controllers' resyncs).
	idleFrom, err := readCost(ctx, s)
	if err != nil {
		return nil, err
	}
	t := time.Now()
	time.Sleep(o.length)
	idleTo, err := readCost(ctx, s)
	if err != nil {
		return nil, err
	}
	idle := idleTo.rates(idleFrom, time.Since(t))

	churnFrom, err := readCost(ctx, s)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	changes := int(o.length.Seconds() * float64(o.rate))
	every := o.length / time.Duration(o.probes)
	tick := time.NewTicker(time.Second / time.Duration(o.rate))
	defer tick.Stop()
	var (
		wg       sync.WaitGroup
		slots    = make(chan struct{}, 256) // writes in flight, so one slow write does not hold the pace
		mu       sync.Mutex
		firstErr error
		writes   []float64 // each CiliumNode put, spec and status, in ms
	)
	put := func(p *pending, key, node string, capacity int) {
		defer wg.Done()
		defer func() { <-slots }()
		t := time.Now()
		err := putCiliumNode(ctx, dyn, ipamtest.CiliumNodeENI(node, uids[node], capacity+2, nil))
		mu.Lock()
		writes = append(writes, float64(time.Since(t))/float64(time.Millisecond))
		if err != nil {
			firstErr = err
		}
		mu.Unlock()
		if err == nil {
			p.written(key)
		}
	}
	probed := 0
	for k := range changes {
		<-tick.C
		// Spread over the nodes; each round of the span gives a node a value
		// its previous round did not.
		node := plane.NodeName((k * 7919) % span)
		capacity := 20 + (k/span)%5
		mirror.expect(node, strconv.Itoa(capacity))
		slots <- struct{}{}
		wg.Add(1)
		go put(mirror, node, node, capacity)
		if probed < o.probes && time.Since(start) >= time.Duration(probed)*every+every/2 {
			node := probe(probed)
			name := fmt.Sprintf("probe-%03d", probed)
			bound.expect(name, "bound")
			slots <- struct{}{}
			wg.Add(1)
			go put(bound, name, node, 1)
			probed++
		}
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	churnTo, err := readCost(ctx, s)
	if err != nil {
		return nil, err
	}
	during := churnTo.rates(churnFrom, time.Since(start))
	achieved := float64(changes) / time.Since(start).Seconds()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return mirror.open() == 0 && bound.open() == 0, nil
	}); err != nil {
		return nil, fmt.Errorf("after the churn %d changes were never mirrored and %d probe pods never bound", mirror.open(), bound.open())
	}
	lag, bind := mirror.done(), bound.done()
	q := func(xs []float64) string {
		return fmt.Sprintf("%.0f / %.0f ms (max %.0f ms)", quantileOf(xs, 0.5), quantileOf(xs, 0.99), quantileOf(xs, 1))
	}
	fmt.Printf("churn: %d changes at %.1f/s over %d nodes (each CiliumNode write, spec and status, took %s); object to mirrored value %s; %d probes bound %s\n",
		changes, achieved, span, q(writes), q(lag), len(bind), q(bind))
	fmt.Printf("churn: kube-apiserver %.0f requests/s (idle %.0f), Node PATCH %.1f/s (idle %.1f), Node watch events %.0f KiB/s (idle %.0f)\n",
		during.requests, idle.requests, during.nodePatches, idle.nodePatches, during.nodeWatchBytes/1024, idle.nodeWatchBytes/1024)
	what := fmt.Sprintf("Capacity source at %d nodes, %d capacity changes a second", o.nodes, o.rate)
	return []row{
		{Measure: fmt.Sprintf("%s: IPAM object change to the Node's mirrored value, p50 / p99 (%d changes)", what, changes), Figure: q(lag)},
		{Measure: fmt.Sprintf("%s: IPAM object change to the waiting pod bound, p50 / p99 (%d probes)", what, len(bind)), Figure: q(bind), Goal: "p99 ≤ 1 s"},
		{Measure: what + ": kube-apiserver requests a second, during the churn / idle",
			Figure: fmt.Sprintf("%.0f / %.0f", during.requests, idle.requests)},
		{Measure: what + ": Node watch events sent by kube-apiserver, KiB a second, during the churn / idle",
			Figure: fmt.Sprintf("%.0f / %.0f KiB/s", during.nodeWatchBytes/1024, idle.nodeWatchBytes/1024)},
	}, nil
}
