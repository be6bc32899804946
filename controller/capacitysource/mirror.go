package capacitysource

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/kube"
)

// FieldManager is the field manager of the mirror's Node patches.
const FieldManager = "capscale-capacity-sources"

// Config wires a Controller.
type Config struct {
	Client kubernetes.Interface
	// Writer patches the Nodes, with a rate limit of its own; nil is
	// Client.
	Writer  kubernetes.Interface
	Dynamic dynamic.Interface
	Sources []*Compiled
	// Recorder records a Warning Event on a Node whose capacity becomes
	// invalid; nil records none.
	Recorder record.EventRecorder
	Metrics  *Metrics
	// Workers patch different Nodes in parallel; default 2.
	Workers int
}

// Controller is the capacity-source mirror: it keeps every Node's
// capscale.io/underlay-ip-source-capacity and capscale.io/underlay-ip-source
// annotations equal to Want over the sources' objects.
type Controller struct {
	cfg     Config
	factory informers.SharedInformerFactory
	nodes   cache.SharedIndexInformer
	view    *View
	queue   workqueue.TypedRateLimitingInterface[string]
	synced  []cache.InformerSynced
	ready   atomic.Bool

	mu sync.Mutex
	// state is each node's last mirror, for the nodes gauge; guarded by mu.
	state map[string]nodeState
}

// New builds the controller and its informers; Run starts them.
func New(cfg Config) (*Controller, error) {
	if cfg.Writer == nil {
		cfg.Writer = cfg.Client
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	c := &Controller{cfg: cfg, state: map[string]nodeState{}}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, time.Minute),
			&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
		),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "capacity-sources", MetricsProvider: queueMetrics{cfg.Metrics}})

	c.factory = kube.InformerFactory(cfg.Client)
	c.nodes = c.factory.Core().V1().Nodes().Informer()
	if err := c.nodes.SetTransform(compactNode); err != nil {
		return nil, err
	}
	reg, err := c.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueNode(obj) },
		UpdateFunc: func(o, n any) {
			if nodeChanged(o, n) {
				c.enqueueNode(n)
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := kube.Deleted(obj).(*corev1.Node); ok {
				c.setState(n.Name, nodeState{})
			}
		},
	})
	if err != nil {
		return nil, err
	}
	c.synced = append(c.synced, reg.HasSynced)

	c.view, err = NewView(cfg.Dynamic, cfg.Sources, cfg.Metrics, func(node string) { c.queue.Add(node) })
	if err != nil {
		return nil, err
	}
	c.synced = append(c.synced, c.view.Synced()...)
	return c, nil
}

// compactNode keeps of a Node what the mirror reads: its identity (an
// Event's involved object), its labels (the sources' selectors) and its
// two mirror annotations.
func compactNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels}}
	for _, k := range mirrorKeys {
		if v, ok := n.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out, nil
}

// nodeChanged: the labels (a selector may now match or not) or the mirror's
// annotations (someone else wrote them) differ.
func nodeChanged(old, cur any) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !labels.Equals(o.Labels, n.Labels) || Current(o.Annotations) != Current(n.Annotations) || has(o.Annotations) != has(n.Annotations)
}

func (c *Controller) enqueueNode(obj any) {
	if n, ok := obj.(*corev1.Node); ok {
		c.queue.Add(n.Name)
	}
}

// HasSynced reports whether every informer has synced and every Node has
// been queued once since Run started.
func (c *Controller) HasSynced() bool { return c.ready.Load() }

// Run starts the informers, waits for them, queues every Node (so that a
// node no source covers any more loses the mirror's value and draws and
// gets the mark capscale.io/underlay-ip-source: none, also for a source
// removed from the file) and mirrors until ctx ends. Until every
// informer has synced nothing is written: a Node keeps what it carries.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	c.view.Start(ctx.Done())
	defer c.view.Shutdown()
	klog.InfoS("Waiting for informers", "controller", "capacity-sources", "sources", c.view.Len())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("capacity-source informers did not sync: %w", ctx.Err())
	}
	for _, key := range c.nodes.GetStore().ListKeys() {
		c.queue.Add(key)
	}
	c.ready.Store(true)
	klog.InfoS("Informers synced; mirroring", "controller", "capacity-sources", "workers", c.cfg.Workers)
	kube.RunWorkers(ctx, c.cfg.Workers, c.worker, c.queue)
	return nil
}

func (c *Controller) worker(ctx context.Context) {
	for {
		name, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.sync(ctx, name)
		switch {
		case err == nil:
			c.queue.Forget(name)
		default:
			klog.ErrorS(err, "Mirroring underlay-IP capacity failed; will retry", "node", name)
			c.queue.AddRateLimited(name)
		}
		c.queue.Done(name)
	}
}

// sync gives one Node the mirror Want decides.
func (c *Controller) sync(ctx context.Context, name string) error {
	obj, exists, err := c.nodes.GetStore().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		c.setState(name, nodeState{})
		return nil
	}
	node := obj.(*corev1.Node)
	want := c.view.Mirror(name, node.Labels)
	patch := PatchFor(node.Annotations, want)
	if patch == nil {
		c.setState(name, stateOf(want))
		return nil
	}
	_, err = c.cfg.Writer.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsNotFound(err):
		c.setState(name, nodeState{})
		return nil
	case err != nil:
		c.cfg.Metrics.patched("error")
		return fmt.Errorf("patching node %s: %w", name, err)
	}
	c.cfg.Metrics.patched("success")
	c.setState(name, stateOf(want))
	klog.V(2).InfoS("Mirrored underlay-IP capacity", "node", name, "value", want.Value, "origin", want.Origin)
	if want.Invalid() && c.cfg.Recorder != nil {
		c.cfg.Recorder.Eventf(node, corev1.EventTypeWarning, "InvalidUnderlayIPCapacitySource",
			"capacity source %s: %s; no new underlay pod fits here", want.Origin, want.Value)
	}
	return nil
}

// nodeState is a node's mirror as the nodes gauge counts it.
type nodeState struct {
	source, state string
}

func stateOf(m Mirror) nodeState {
	switch {
	case m == (Mirror{}), m == Uncovered:
		return nodeState{}
	case m.Invalid():
		return nodeState{source: sourceOf(m), state: "invalid"}
	}
	return nodeState{source: sourceOf(m), state: "valid"}
}

// sourceOf is the source a mirror came from, "*" for several.
func sourceOf(m Mirror) string {
	for i, r := range m.Origin {
		switch r {
		case ' ':
			return m.Origin[:i]
		case ',':
			return "*"
		}
	}
	return m.Origin
}

func (c *Controller) setState(name string, s nodeState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.state[name]
	if ok && old == s {
		return
	}
	if ok {
		c.cfg.Metrics.nodes.WithLabelValues(old.source, old.state).Dec()
	}
	if s == (nodeState{}) {
		delete(c.state, name)
		return
	}
	c.state[name] = s
	c.cfg.Metrics.nodes.WithLabelValues(s.source, s.state).Inc()
}
