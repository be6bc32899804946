package publisher

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// Node states in capscale_extender_capacity_nodes.
const (
	statePublished = "published"
	stateInvalid   = "invalid"
	stateForeign   = "foreign"
)

// Publisher keeps the nodes' underlay-IP capacity published. Run it on the
// leader only: two publishers would agree, but would write twice.
type Publisher struct {
	client   kubernetes.Interface
	nodes    corelisters.NodeLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	def      int64
	recorder record.EventRecorder
	events   record.EventBroadcaster

	patches *prometheus.CounterVec
	states  *prometheus.GaugeVec

	mu sync.Mutex
	// state is each node's last state, for the gauge and so that an
	// Event is emitted once per change, not once per resync.
	state  map[string]string
	counts map[string]int
}

// New returns a publisher fed by informer. def is the capacity of a node
// without the annotation; reg, if not nil, receives the metrics. Of a Node
// it reads only the name, UID and resourceVersion, capscale's annotations and
// label and the underlay resource in status, so the informer may cache
// extender.CompactNode's reduced Nodes; reading more needs that changed too.
func New(client kubernetes.Interface, informer coreinformers.NodeInformer, def int64, reg prometheus.Registerer) (*Publisher, error) {
	const ns, sub = "capscale", "extender"
	p := &Publisher{
		client: client,
		nodes:  informer.Lister(),
		synced: informer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "capacity-publisher"}),
		def: def,
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "capacity_patches_total",
			Help: "Node status patches that publish underlay-IP capacity, by result (ok, error).",
		}, []string{"result"}),
		states: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "capacity_nodes",
			Help: "Nodes by native-mode capacity state: published, invalid (annotation invalid, 0 published) or foreign (another writer owns the resource; left alone).",
		}, []string{"state"}),
		state:  map[string]string{},
		counts: map[string]int{},
	}
	if reg != nil {
		if err := reg.Register(p.patches); err != nil {
			return nil, fmt.Errorf("registering the publisher's metrics: %w", err)
		}
		if err := reg.Register(p.states); err != nil {
			return nil, fmt.Errorf("registering the publisher's metrics: %w", err)
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: p.enqueue,
		UpdateFunc: func(old, cur any) {
			if relevantChange(old, cur) {
				p.enqueue(cur)
			}
		},
		DeleteFunc: p.forget,
	}); err != nil {
		return nil, fmt.Errorf("adding the publisher's node event handler: %w", err)
	}
	return p, nil
}

// relevantChange skips the many node updates (heartbeats, conditions) that
// change neither the annotations, the labels nor our resource.
func relevantChange(old, cur any) bool {
	o, ok1 := old.(*v1.Node)
	n, ok2 := cur.(*v1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !equality.Semantic.DeepEqual(o.Annotations, n.Annotations) ||
		o.Labels[names.UnderlayIPCapacityLabel] != n.Labels[names.UnderlayIPCapacityLabel] ||
		!equality.Semantic.DeepEqual(o.Status.Capacity[underlay.Resource], n.Status.Capacity[underlay.Resource]) ||
		!equality.Semantic.DeepEqual(o.Status.Allocatable[underlay.Resource], n.Status.Allocatable[underlay.Resource])
}

func (p *Publisher) enqueue(obj any) {
	if n, ok := obj.(*v1.Node); ok {
		p.queue.Add(n.Name)
	}
}

func (p *Publisher) forget(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if n, ok := obj.(*v1.Node); ok {
		p.setState(n.Name, "")
	}
}

// Run publishes until ctx is done (leadership lost or shutdown).
func (p *Publisher) Run(ctx context.Context) {
	defer p.queue.ShutDown()
	p.events = record.NewBroadcaster(record.WithContext(ctx))
	p.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.client.CoreV1().Events("")})
	defer p.events.Shutdown()
	p.recorder = p.events.NewRecorder(scheme.Scheme, v1.EventSource{Component: "capscale-capacity-publisher"})
	if !cache.WaitForCacheSync(ctx.Done(), p.synced) {
		return
	}
	// Leadership may have moved while this replica's informer kept
	// running: look at every node once.
	all, err := p.nodes.List(labels.Everything())
	if err == nil {
		for _, n := range all {
			p.queue.Add(n.Name)
		}
	}
	klog.InfoS("Publishing underlay-IP capacity in Node status", "nodes", len(all))
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	for p.processNext(ctx) {
	}
}

func (p *Publisher) processNext(ctx context.Context) bool {
	name, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(name)
	if err := p.sync(ctx, name); err != nil {
		klog.ErrorS(err, "Publishing underlay-IP capacity failed, retrying", "node", name)
		p.queue.AddRateLimited(name)
		return true
	}
	p.queue.Forget(name)
	return true
}

func (p *Publisher) sync(ctx context.Context, name string) error {
	node, err := p.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		p.setState(name, "")
		return nil
	}
	if err != nil {
		return err
	}
	d := Decide(node, p.def)
	if d.Foreign != "" {
		if p.setState(name, stateForeign) {
			klog.InfoS("Not publishing underlay-IP capacity", "node", klog.KObj(node), "reason", d.Foreign)
			p.recorder.Event(node, v1.EventTypeWarning, "UnderlayIPCapacityNotManaged", d.Foreign)
		}
		return nil
	}
	if d.Patch {
		_, err := p.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, Patch(d.Want), metav1.PatchOptions{FieldManager: "capscale-capacity-publisher"}, "status")
		if err != nil {
			p.patches.WithLabelValues("error").Inc()
			return fmt.Errorf("patching node %s status: %w", name, err)
		}
		p.patches.WithLabelValues("ok").Inc()
		klog.V(2).InfoS("Published underlay-IP capacity", "node", klog.KObj(node), "capacity", d.Want)
	}
	state := statePublished
	if d.Invalid != "" {
		state = stateInvalid
	}
	if p.setState(name, state) && d.Invalid != "" {
		klog.ErrorS(nil, "Invalid underlay IP capacity annotation, publishing 0", "node", klog.KObj(node), "reason", d.Invalid)
		p.recorder.Event(node, v1.EventTypeWarning, "InvalidUnderlayIPCapacity", d.Invalid+"; published "+names.UnderlayIPResource+"=0")
	}
	return nil
}

// setState records node's state ("" forgets it) and reports whether it
// changed.
func (p *Publisher) setState(node, state string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.state[node]
	if old == state {
		return false
	}
	if old != "" {
		p.counts[old]--
		p.states.WithLabelValues(old).Set(float64(p.counts[old]))
	}
	if state == "" {
		delete(p.state, node)
		return true
	}
	p.state[node] = state
	p.counts[state]++
	p.states.WithLabelValues(state).Set(float64(p.counts[state]))
	return true
}

// LeaseName is the Lease the publishers of one cluster elect a leader on.
const LeaseName = "capscale-capacity-publisher"

// RunElected runs run while this process holds the Lease namespace/LeaseName
// as identity, and campaigns again after losing it, until ctx is done.
// client-go's usual timings (15s/10s/2s): a new leader takes over within
// about 15 s of the old one's death, at once after a clean shutdown.
func RunElected(ctx context.Context, client kubernetes.Interface, namespace, identity string, run func(context.Context)) error {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, LeaseName,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return fmt.Errorf("creating the publisher's lease lock: %w", err)
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   15 * time.Second,
			RenewDeadline:   10 * time.Second,
			RetryPeriod:     2 * time.Second,
			ReleaseOnCancel: true,
			Name:            LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: run,
				OnStoppedLeading: func() { klog.InfoS("Capacity publisher lost or left its lease", "identity", identity) },
				OnNewLeader: func(id string) {
					if id != identity {
						klog.InfoS("Another capacity publisher leads", "leader", id)
					}
				},
			},
		})
	}
	return nil
}
