package publisher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// DefaultRecheckInterval is how often a node with an invalid capacity is
// looked at again, so that what is published follows the IPs in use.
const DefaultRecheckInterval = 10 * time.Second

// DefaultWorkers is how many nodes are synced at once, as many as the
// capacity-source mirror's workers that feed it.
const DefaultWorkers = 16

// Options configure New.
type Options struct {
	// Rule is the capacity rule: the capacity of a node without the
	// annotation or label, and whether to wait for the capacity-source
	// mirror.
	Rule underlay.Rule
	// Drawn returns what the pod-network pods of a draws-all node that ask
	// for no IP take from its pool (the extender's ledger); nil counts
	// none. They are left out of what is published, since kube-scheduler
	// counts only requests.
	Drawn func(node string) int64
	// InUse returns the underlay IPs a node's bound, non-terminal pods hold
	// (the extender's ledger); nil counts none.
	InUse func(node string) int64
	// Unlisted returns what a node's pods that have no IP yet charge there
	// (the extender's ledger); nil counts none.
	Unlisted func(node string) int64
	// InUseSynced reports whether InUse follows the pods; Run publishes
	// nothing before it does, or an invalid node would get 0.
	InUseSynced cache.InformerSynced
	// RecheckInterval is how often invalid nodes are synced again; 0 means
	// DefaultRecheckInterval.
	RecheckInterval time.Duration
	// Workers sync nodes side by side; 0 means DefaultWorkers. One worker
	// waits out each patch's round trip, which caps a busy pool's
	// changes and a fresh install's first pass at what one apiserver
	// request a node allows (issue 55 §6).
	Workers int
	// Registerer, if not nil, receives the metrics.
	Registerer prometheus.Registerer
	// Sources, if not nil, is the publisher's own read of the capacity
	// sources (extender/sourced): what it says of a node takes the place
	// of the mirror's annotations the Node carries, and each patch writes
	// them with the capacity, so that a change is one Node write. Run
	// publishes nothing before it has synced; tell the publisher of its
	// changes with SourceChanged.
	Sources Sources
}

// Sources is what the publisher reads of the capacity sources.
type Sources interface {
	// Mirror is what the sources say of n.
	Mirror(n *v1.Node) capacitysource.Mirror
	HasSynced() bool
}

// Publisher keeps the nodes' underlay-IP capacity published. Run it on the
// leader only: two publishers would agree, but would write twice.
type Publisher struct {
	client      kubernetes.Interface
	nodes       corelisters.NodeLister
	synced      []cache.InformerSynced
	rule        underlay.Rule
	inUse       func(string) int64
	drawn       func(string) int64
	unlisted    func(string) int64
	recheck     time.Duration
	workers     int
	sources     Sources
	newRecorder func(context.Context) (record.EventRecorder, func())

	// term is the current leadership term, nil while not leading: the
	// event handlers drop events then, since Run lists every node anyway.
	term atomic.Pointer[term]

	patches *prometheus.CounterVec
	taints  *prometheus.CounterVec
	states  *prometheus.GaugeVec

	mu sync.Mutex
	// state is each node's last state, for the gauge and so that an
	// Event is emitted once per change, not once per resync.
	state  map[string]nodeState
	counts map[string]int
	// drawing are the nodes that draw all: what they publish follows their
	// pods too (UsageChanged). Guarded by mu.
	drawing map[string]bool
	// withholding are the valid nodes published below their capacity
	// (held IPs, the IPAM's larger report), guarded by mu: pod events and
	// a hold's end move what they publish.
	withholding map[string]bool
	// written is, per node, the patch last sent, until the informer
	// delivers a change of the node; guarded by mu. A sync that runs again
	// before the informer has shown that write reads the old node and
	// would write the same value twice; the write's own update event
	// queues the node again.
	written map[string]string
}

// pending reports whether patch was sent for node already and the
// informer has not delivered a change of it since (enqueue forgets).
func (p *Publisher) pending(node string, patch []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.written[node]
	return ok && w == string(patch)
}

// wrote records patch as sent for node.
func (p *Publisher) wrote(node string, patch []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.written == nil {
		p.written = map[string]string{}
	}
	p.written[node] = string(patch)
}

// forgetWritten forgets node's last patch: the informer has shown a change.
func (p *Publisher) forgetWritten(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.written, node)
}

// term is one leadership term. A workqueue cannot be used again once shut
// down, so each term has its own.
type term struct {
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
}

// New returns a publisher fed by informer. Of a Node it reads only the name,
// UID and resourceVersion, capscale's annotations and label and the underlay
// resource in status and the startup taint, so the informer may cache extender.CompactNode's
// reduced Nodes; reading more needs that changed too.
func New(client kubernetes.Interface, informer coreinformers.NodeInformer, o Options) (*Publisher, error) {
	const ns, sub = "capscale", "extender"
	p := &Publisher{
		client:      client,
		nodes:       informer.Lister(),
		synced:      []cache.InformerSynced{informer.Informer().HasSynced},
		rule:        o.Rule,
		inUse:       o.InUse,
		drawn:       o.Drawn,
		unlisted:    o.Unlisted,
		recheck:     o.RecheckInterval,
		workers:     o.Workers,
		sources:     o.Sources,
		newRecorder: apiRecorder(client),
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "capacity_patches_total",
			Help: "Node status patches that publish underlay-IP capacity, by result (ok, error).",
		}, []string{"result"}),
		taints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "startup_taint_removals_total",
			Help: "Removals of the startup taint capscale.io/underlay-ip-unpublished from Nodes whose capacity was published, by result (ok, error).",
		}, []string{"result"}),
		states: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "capacity_nodes",
			Help: "Nodes by native-mode capacity state: published, invalid (capacity annotation or label invalid; the IPs in use published, none free) or foreign (another writer owns the resource; left alone).",
		}, []string{"state"}),
		state:   map[string]nodeState{},
		counts:  map[string]int{},
		drawing: map[string]bool{},
	}
	if p.inUse == nil {
		p.inUse = func(string) int64 { return 0 }
	}
	if p.unlisted == nil {
		p.unlisted = func(string) int64 { return 0 }
	}
	if o.InUseSynced != nil {
		p.synced = append(p.synced, o.InUseSynced)
	}
	if o.Sources != nil {
		p.synced = append(p.synced, o.Sources.HasSynced)
	}
	if p.recheck <= 0 {
		p.recheck = DefaultRecheckInterval
	}
	if p.workers <= 0 {
		p.workers = DefaultWorkers
	}
	if r := o.Registerer; r != nil {
		for _, c := range []prometheus.Collector{p.patches, p.taints, p.states} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("registering the publisher's metrics: %w", err)
			}
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: p.enqueue,
		UpdateFunc: func(old, cur any) {
			// A source's nodeSelector reads the node's labels.
			if relevantChange(old, cur) || (p.sources != nil && labelsChanged(old, cur)) {
				p.enqueue(cur)
			}
		},
		DeleteFunc: p.forget,
	}); err != nil {
		return nil, fmt.Errorf("adding the publisher's node event handler: %w", err)
	}
	return p, nil
}

// apiRecorder records Events to the apiserver, one broadcaster per term.
func apiRecorder(client kubernetes.Interface) func(context.Context) (record.EventRecorder, func()) {
	return func(ctx context.Context) (record.EventRecorder, func()) {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		return b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "capscale-capacity-publisher"}), b.Shutdown
	}
}

// relevantChange skips the many node updates (heartbeats, conditions) that
// change neither the annotations, the labels, our resource nor whether the
// node carries the startup taint.
func relevantChange(old, cur any) bool {
	o, ok1 := old.(*v1.Node)
	n, ok2 := cur.(*v1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !equality.Semantic.DeepEqual(o.Annotations, n.Annotations) ||
		o.Labels[names.UnderlayIPCapacityLabel] != n.Labels[names.UnderlayIPCapacityLabel] ||
		HasStartupTaint(o) != HasStartupTaint(n) ||
		!equality.Semantic.DeepEqual(o.Status.Capacity[underlay.Resource], n.Status.Capacity[underlay.Resource]) ||
		!equality.Semantic.DeepEqual(o.Status.Allocatable[underlay.Resource], n.Status.Allocatable[underlay.Resource])
}

// labelsChanged reports whether a node update changed its labels.
func labelsChanged(old, cur any) bool {
	o, ok1 := old.(*v1.Node)
	n, ok2 := cur.(*v1.Node)
	return !ok1 || !ok2 || !labels.Equals(o.Labels, n.Labels)
}

// SourceChanged is told that what the capacity sources say of node may
// have moved (Options.Sources): it is synced at once.
func (p *Publisher) SourceChanged(node *v1.Node) {
	if t := p.term.Load(); t != nil {
		t.queue.Add(node.Name)
	}
}

// enqueue queues a node at once, not rate-limited: a kubelet that zeroed
// our resource on re-registration gets it back on that very event.
func (p *Publisher) enqueue(obj any) {
	n, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	p.forgetWritten(n.Name)
	if t := p.term.Load(); t != nil {
		t.queue.Add(n.Name)
	}
}

// UsageChanged is told that the IPs in use on node may have moved (the
// extender's Tracker calls it after its ledger applied a pod event). An
// invalid node publishes exactly those IPs, a node that draws all its
// capacity less what its unasking pods take, and a valid one whose IPAM
// reports IPs in use its capacity less what the IPAM holds beyond the
// pods, so it is queued at once: a holder leaving must not leave
// kube-scheduler a free IP there. Pods do not move what any other node
// publishes.
func (p *Publisher) UsageChanged(node string) {
	if p.stateOf(node) != stateInvalid && !p.drawsAll(node) && !p.chargesBeyondPods(node) {
		return
	}
	if t := p.term.Load(); t != nil {
		t.queue.Add(node)
	}
}

func (p *Publisher) forget(obj any) {
	if n, ok := kube.Deleted(obj).(*v1.Node); ok {
		p.setState(n.Name, nodeState{})
		p.setDrawsAll(n.Name, false)
	}
}

// Run publishes until ctx is done (leadership lost or shutdown). It may be
// called again after it returned, once per leadership term.
func (p *Publisher) Run(ctx context.Context) {
	t := &term{queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "capacity-publisher"})}
	defer t.queue.ShutDown()
	recorder, stop := p.newRecorder(ctx)
	defer stop()
	t.recorder = recorder
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return
	}
	// Handlers feed t from now on; the list below covers what came before.
	p.term.Store(t)
	defer p.term.CompareAndSwap(t, nil)
	// Leadership may have moved while this replica's informer kept
	// running: look at every node once.
	all, err := p.nodes.List(labels.Everything())
	if err == nil {
		for _, n := range all {
			t.queue.Add(n.Name)
		}
	}
	klog.InfoS("Publishing underlay-IP capacity in Node status", "nodes", len(all))
	go func() {
		<-ctx.Done()
		t.queue.ShutDown()
	}()
	// What an invalid node publishes follows the IPs in use: UsageChanged
	// queues it on each pod event; this recheck is the backstop for an
	// InUse whose owner does not call it.
	go wait.Until(func() {
		for _, name := range p.inState(stateInvalid) {
			t.queue.Add(name)
		}
	}, p.recheck, ctx.Done())
	// The queue never hands one node to two workers; what they share is
	// guarded by mu.
	syncNode := func(ctx context.Context, name string) (time.Duration, error) { return 0, p.sync(ctx, t.recorder, name) }
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			for kube.ProcessNext(ctx, t.queue, syncNode, "Publishing underlay-IP capacity failed, retrying", "node") {
			}
		})
	}
	wg.Wait()
}

func (p *Publisher) sync(ctx context.Context, recorder record.EventRecorder, name string) error {
	node, err := p.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		p.setState(name, nodeState{})
		p.setWithholding(name, false)
		p.forgetWritten(name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting node %s from the informer: %w", name, err)
	}
	// With the sources read here, the node as the rule reads it, and the
	// mirror's annotations this patch writes (nil: the node has them).
	var mirror map[string]any
	if p.sources != nil {
		m := p.sources.Mirror(node)
		mirror = capacitysource.AnnotationChanges(node.Annotations, m)
		over := *node
		over.Annotations = m.Over(node.Annotations)
		node = &over
	}
	// An invalid node publishes what is in use there. Record it as invalid
	// before reading that, so that UsageChanged queues it for any pod event
	// from now on: one that came between the read and the state would be
	// lost until the recheck. announce is whether this invalid value is new.
	prev := p.stateOfNode(name)
	announce := false
	c := p.rule.Capacity(node.Annotations, node.Labels)
	// Likewise a node that draws all, whose published value follows its
	// unasking pods.
	p.setDrawsAll(name, c.DrawsAll)
	if c.Invalid != "" {
		// A node not read yet is announced by nothing: at a fresh
		// install that is every node for a few minutes.
		announce = p.setState(name, nodeState{stateInvalid, c.Invalid}) && !c.Unread
	}
	d := Decide(node, p.rule, Use{InUse: p.inUse(name), Drawn: p.drawnOn(name), Unlisted: p.unlisted(name)})
	p.setWithholding(name, d.Invalid == "" && d.Foreign == "" && d.Want < c.IPs)
	if d.Foreign != "" {
		if p.setState(name, nodeState{stateForeign, d.Foreign}) {
			klog.InfoS("Not publishing underlay-IP capacity", "node", klog.KObj(node), "reason", d.Foreign)
			recorder.Event(node, v1.EventTypeWarning, "UnderlayIPCapacityNotManaged", d.Foreign)
		}
		// The mirror's annotations are still written: kubectl capscale
		// ips and the workload API read them.
		if mirror == nil {
			return nil
		}
		_, err := p.writeStatus(ctx, name, MirrorPatch(mirror))
		return err
	}
	// Encoded only when a write may be due: most syncs (pod events on an
	// unchanged node) write nothing.
	if d.Patch || mirror != nil {
		sent, err := p.writeStatus(ctx, name, Patch(d.Want, mirror))
		if err != nil {
			if announce {
				// Announced on the retry that publishes it.
				p.setState(name, prev)
			}
			return err
		}
		if sent {
			klog.V(2).InfoS("Published underlay-IP capacity", "node", klog.KObj(node), "capacity", d.Want)
		}
	}
	if d.Invalid == "" {
		p.setState(name, nodeState{state: statePublished})
		if ReleaseTaint(node, d) {
			return p.releaseTaint(ctx, name)
		}
		return nil
	}
	// Once per invalid value: the IPs in use may move under it.
	if announce {
		msg := fmt.Sprintf("%s; published %s=%d, the IPs its pods hold: no new pod fits, and running pods still pass the kubelet's admission", d.Invalid, names.UnderlayIPResource, d.Want)
		klog.ErrorS(nil, "Invalid underlay IP capacity", "node", klog.KObj(node), "published", d.Want, "reason", d.Invalid)
		recorder.Event(node, v1.EventTypeWarning, "InvalidUnderlayIPCapacity", msg)
	}
	return nil
}

// writeStatus sends patch to node name's status unless it was sent already
// and the informer has not shown a change since (pending), and reports
// whether it sent it.
func (p *Publisher) writeStatus(ctx context.Context, name string, patch []byte) (bool, error) {
	if p.pending(name, patch) {
		return false, nil
	}
	if _, err := p.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "capscale-capacity-publisher"}, "status"); err != nil {
		p.patches.WithLabelValues("error").Inc()
		return false, fmt.Errorf("patching node %s status: %w", name, err)
	}
	p.patches.WithLabelValues("ok").Inc()
	p.wrote(name, patch)
	return true, nil
}

// chargesBeyondPods reports whether pod events move what node publishes
// while it is valid: it was published below its capacity, or its IPAM
// reports the IPs in use.
func (p *Publisher) chargesBeyondPods(node string) bool {
	p.mu.Lock()
	w := p.withholding[node]
	p.mu.Unlock()
	if w {
		return true
	}
	n, err := p.nodes.Get(node)
	if err != nil {
		return false
	}
	if p.sources != nil {
		return p.sources.Mirror(n).Used != ""
	}
	_, reported := n.Annotations[names.UnderlayIPSourceUsedAnnotation]
	return reported
}

func (p *Publisher) setWithholding(node string, w bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.withholding == nil {
		p.withholding = map[string]bool{}
	}
	if w {
		p.withholding[node] = true
	} else {
		delete(p.withholding, node)
	}
}

// releaseTaint removes the startup taint from node name, whose capacity is
// now in its status. The informer's Node holds only capscale's taint, so
// the node's taints are read from the API, and the patch tests them: a
// conflict with another writer is an error, and the retry reads again.
func (p *Publisher) releaseTaint(ctx context.Context, name string) error {
	node, err := p.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting node %s to remove taint %s: %w", name, StartupTaint, err)
	}
	if !HasStartupTaint(node) {
		return nil
	}
	patch, err := TaintPatch(node.Spec.Taints)
	if err != nil {
		return fmt.Errorf("encoding the patch that removes taint %s from node %s: %w", StartupTaint, name, err)
	}
	if _, err := p.client.CoreV1().Nodes().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "capscale-capacity-publisher"}); err != nil {
		p.taints.WithLabelValues("error").Inc()
		return fmt.Errorf("removing taint %s from node %s: %w", StartupTaint, name, err)
	}
	p.taints.WithLabelValues("ok").Inc()
	klog.InfoS("Removed the startup taint: underlay-IP capacity published", "node", klog.KRef("", name), "taint", StartupTaint)
	return nil
}
