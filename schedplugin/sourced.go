package schedplugin

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/underlay"
)

// sourced is the plugin reading the capacity sources itself: the same View
// capscale-controller's mirror writes from, held in memory, so that a
// change of an IPAM's object reaches a waiting pod without a Node patch and
// the Node watch of every component that follows it
// (docs/design/capacity-mirror.md). What it says of a node replaces the
// mirror's annotations the Node carries; the capacity annotation and the
// label stay the Node's, so the precedence is the rule's as before.
type sourced struct {
	view  *capacitysource.View
	nodes corelisters.NodeLister
	rule  underlay.Rule
	// activate is the handle's Activate: a node's answer that frees IPs
	// moves the pods turned away there back to the active queue, since no
	// cluster event the scheduler watches marks that moment.
	activate func(map[string]*v1.Pod)
	synced   atomic.Bool
	metrics  *readMetrics

	// reading serializes read: two reads of a node, from the View's
	// handlers and the Node informer's, must store in the order they read.
	reading sync.Mutex

	mu sync.Mutex
	// byNode is each node's answer; guarded by mu, each entry never
	// replaced once made, so a memo reading may keep it.
	byNode map[string]*viewed
	// waiting are the pods Filter turned away for IPs, by namespace/name.
	waiting map[string]*v1.Pod
}

// viewed is one node's answer. gen moves on at each change: a capacity
// read from an older gen is read again (capacity.go).
type viewed struct {
	gen    atomic.Uint64
	mirror atomic.Pointer[capacitysource.Mirror]
}

func newSourced(rule underlay.Rule, activate func(map[string]*v1.Pod)) *sourced {
	return &sourced{rule: rule, activate: activate, metrics: newReadMetrics(nil), byNode: map[string]*viewed{}, waiting: map[string]*v1.Pod{}}
}

// entry is node's entry, made on first use.
func (s *sourced) entry(node string) *viewed {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byNode[node]
	if !ok {
		e = &viewed{}
		s.byNode[node] = e
	}
	return e
}

// annotations is what the rule reads of node: its annotations with the
// mirror's as the View says, or without them until the View has read the
// node (awaitMirror then counts it 0, not read yet). e and gen stamp the
// reading.
func (s *sourced) annotations(node *v1.Node) (map[string]string, *viewed, uint64) {
	e := s.entry(node.Name)
	gen := e.gen.Load()
	m := e.mirror.Load()
	if m == nil {
		return capacitysource.Mirror{}.Over(node.Annotations), e, gen
	}
	return m.Over(node.Annotations), e, gen
}

// over is annotations, read fresh from the apiserver for the check at
// bind, with the View's mirror of node over them.
func (s *sourced) over(node string, annotations map[string]string) map[string]string {
	m := s.entry(node).mirror.Load()
	if m == nil {
		return capacitysource.Mirror{}.Over(annotations)
	}
	return m.Over(annotations)
}

// changed reads node's answer again; until the View has synced nothing is
// read (the sync reads every node).
func (s *sourced) changed(node string) {
	if !s.synced.Load() {
		return
	}
	n, err := s.nodes.Get(node)
	if err != nil {
		// Not a Node (yet): its Add reads it.
		return
	}
	s.read(n)
}

// read stores what the View says of n and wakes the pods it may fit.
func (s *sourced) read(n *v1.Node) {
	s.reading.Lock()
	defer s.reading.Unlock()
	m := s.view.Mirror(n.Name, n.Labels)
	e := s.entry(n.Name)
	old := e.mirror.Swap(&m)
	if old == nil {
		s.metrics.nodes.Inc()
	}
	if old != nil && *old == m {
		return
	}
	e.gen.Add(1)
	before := &v1.Node{ObjectMeta: n.ObjectMeta}
	if old == nil {
		before = nil
	} else {
		before.Annotations = old.Over(n.Annotations)
	}
	after := &v1.Node{ObjectMeta: n.ObjectMeta}
	after.Annotations = m.Over(n.Annotations)
	s.wake(before, after)
}

// turnedAway notes a pod Filter rejected for IPs.
func (s *sourced) turnedAway(pod *v1.Pod) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.waiting[pod.Namespace+"/"+pod.Name] = pod
	s.mu.Unlock()
}

// forget drops a deleted pod from those waiting.
func (s *sourced) forget(pod *v1.Pod) {
	s.mu.Lock()
	delete(s.waiting, pod.Namespace+"/"+pod.Name)
	s.mu.Unlock()
}

// wake activates the waiting pods the change from before to after may fit,
// by the queueing hint's own test of a Node update (hints.go).
func (s *sourced) wake(before, after *v1.Node) {
	s.mu.Lock()
	var fit map[string]*v1.Pod
	for k, pod := range s.waiting {
		if !reachable(pod, after) {
			continue
		}
		if !capacityGrew(underlay.PodNeed(pod), before, after, s.rule) && !ipamReleased(before, after, s.rule) {
			continue
		}
		if fit == nil {
			fit = map[string]*v1.Pod{}
		}
		fit[k] = pod
		delete(s.waiting, k)
	}
	s.mu.Unlock()
	if len(fit) > 0 && s.activate != nil {
		klog.V(5).InfoS("A node's underlay IP capacity source changed; activating the pods it may fit", "node", klog.KObj(after), "pods", len(fit))
		s.activate(fit)
	}
}

// run starts the View, waits for it and for the Node informer, then reads
// every node and serves; it returns at once, the informers running until
// ctx ends.
func (s *sourced) run(ctx context.Context, nodesSynced cache.InformerSynced) {
	s.view.Start(ctx.Done())
	go func() {
		defer s.view.Shutdown()
		if !cache.WaitForCacheSync(ctx.Done(), append(s.view.Synced(), nodesSynced)...) {
			return
		}
		s.synced.Store(true)
		nodes, err := s.nodes.List(labels.Everything())
		if err != nil {
			klog.ErrorS(err, "Listing nodes for the capacity sources' first read")
		}
		for _, n := range nodes {
			s.read(n)
		}
		s.metrics.synced.Set(1)
		klog.InfoS("Capacity sources read", "plugin", Name, "nodes", len(nodes), "sources", s.view.Len())
		<-ctx.Done()
	}()
}

// follow reads a node again when it comes or its labels change (a
// source's selector), and forgets a deleted one; a pod bound or deleted
// is no longer waiting.
func (s *sourced) follow(nodes, pods cache.SharedIndexInformer) (cache.InformerSynced, error) {
	reg, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok && s.synced.Load() {
				s.read(n)
			}
		},
		UpdateFunc: func(o, n any) {
			on, ok1 := o.(*v1.Node)
			nn, ok2 := n.(*v1.Node)
			if ok1 && ok2 && s.synced.Load() && !labels.Equals(on.Labels, nn.Labels) {
				s.read(nn)
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := kube.Deleted(obj).(*v1.Node); ok {
				// After any read of it in flight, so that the count
				// of nodes read does not keep a deleted one.
				s.reading.Lock()
				defer s.reading.Unlock()
				s.mu.Lock()
				if e, ok := s.byNode[n.Name]; ok && e.mirror.Load() != nil {
					s.metrics.nodes.Dec()
				}
				delete(s.byNode, n.Name)
				s.mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// Bound by another way (a pod that went away made room): no
		// longer waiting.
		UpdateFunc: func(_, n any) {
			if p, ok := n.(*v1.Pod); ok && p.Spec.NodeName != "" {
				s.forget(p)
			}
		},
		DeleteFunc: func(obj any) {
			if p, ok := kube.Deleted(obj).(*v1.Pod); ok {
				s.forget(p)
			}
		},
	}); err != nil {
		return nil, err
	}
	return reg.HasSynced, nil
}

// shared are the reads of the capacity sources this process runs, by file
// and rule: every profile of a KubeSchedulerConfiguration builds its own
// plugin (the chart's two, default-scheduler and capscale-scheduler), and
// each building a View would decode every object change once more. One
// read serves them all; the profiles share the scheduling queue, so one
// Activate reaches their pods.
var shared struct {
	sync.Mutex
	m map[sharedKey]*sourced
}

type sharedKey struct {
	file string
	rule underlay.Rule
}

// newSourcedFor is the plugin's read of the capacity sources named in
// args: the one this process runs for that file and rule, or a new one
// with the handle's client config, informers and Activate, started under
// ctx; nil when args name none.
func newSourcedFor(ctx context.Context, fh fwk.Handle, args Args) (*sourced, error) {
	if args.CapacitySources == "" {
		return nil, nil
	}
	key := sharedKey{file: args.CapacitySources, rule: args.Rule()}
	shared.Lock()
	defer shared.Unlock()
	if s, ok := shared.m[key]; ok {
		return s, nil
	}
	s, err := startSourced(ctx, fh, args)
	if err != nil {
		return nil, err
	}
	if shared.m == nil {
		shared.m = map[sharedKey]*sourced{}
	}
	shared.m[key] = s
	return s, nil
}

// startSourced builds and starts a read of the capacity sources.
func startSourced(ctx context.Context, fh fwk.Handle, args Args) (*sourced, error) {
	if fh == nil || fh.KubeConfig() == nil || fh.SharedInformerFactory() == nil {
		return nil, fmt.Errorf("capacitySources %s: the framework handle has no client config or informers", args.CapacitySources)
	}
	srcs, err := capacitysource.Load(args.CapacitySources)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rest.AddUserAgent(rest.CopyConfig(fh.KubeConfig()), Name+"-capacity-sources"))
	if err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx).WithName(Name)
	s := newSourced(args.Rule(), func(pods map[string]*v1.Pod) { fh.Activate(logger, pods) })
	s.metrics = processReadMetrics()
	if s.view, err = capacitysource.NewView(dyn, srcs, s.metrics.view, s.changed); err != nil {
		return nil, err
	}
	f := fh.SharedInformerFactory()
	s.nodes = f.Core().V1().Nodes().Lister()
	nodesSynced, err := s.follow(f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer())
	if err != nil {
		return nil, err
	}
	s.run(ctx, nodesSynced)
	return s, nil
}
