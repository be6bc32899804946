package devices

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/underlay"
)

// FieldManager names the publisher's writes.
const FieldManager = "capscale-device-publisher"

// byPool indexes slices and claims by the pool (node) of Driver they touch.
const byPool = "pool"

// Options configure New; the same inputs as native mode's publisher, whose
// Decide gives each node's budget.
type Options struct {
	Rule     underlay.Rule
	InUse    func(node string) int64
	Drawn    func(node string) int64
	Unlisted func(node string) int64
	// InUseSynced reports whether InUse follows the pods.
	InUseSynced cache.InformerSynced
	Registerer  prometheus.Registerer
	// SkipNodeOperations marks the slices of every node that declares
	// OptionalNodeOperationsFeature as needing no kubelet plugin.
	SkipNodeOperations bool
	// PluginSelector, if not nil, selects the kubelet plugin's pods in
	// PluginNamespace: a node where none of them is Ready publishes no
	// free device (served.go). Nil publishes every node.
	PluginSelector  labels.Selector
	PluginNamespace string
}

// OptionalNodeOperationsFeature is the feature a kubelet with the
// DRAOptionalNodeOperations gate declares in its Node's status.
const OptionalNodeOperationsFeature = "DRAOptionalNodeOperations"

// Publisher keeps every node's pool of Driver equal to Names(budget,
// allocated). Run it on the leader only.
type Publisher struct {
	client kubernetes.Interface
	nodes  corelisters.NodeLister
	slices cache.SharedIndexInformer
	claims cache.SharedIndexInformer
	// plugins are the kubelet plugin's pods; nil without PluginSelector.
	plugins  cache.SharedIndexInformer
	unserved unserved
	synced   []cache.InformerSynced
	o        Options

	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[string]]
	// skipDropped: the apiserver dropped spec.skipNodeOperations once.
	skipDropped atomic.Bool

	writes        *prometheus.CounterVec
	devices       prometheus.GaugeFunc
	unservedNodes prometheus.GaugeFunc
}

// New returns a publisher over the extender's node informer; it makes its
// own informers of Driver's ResourceSlices and of the ResourceClaims
// (each reduced to Driver's allocation results), which Start runs.
func New(client kubernetes.Interface, nodes coreinformers.NodeInformer, o Options) (*Publisher, error) {
	p := &Publisher{
		client: client,
		nodes:  nodes.Lister(),
		o:      o,
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "capscale", Subsystem: "extender", Name: "device_slice_writes_total",
			Help: "Writes of DRA mode's ResourceSlices (driver " + Driver + "), by verb (create, update, delete) and result (ok, error).",
		}, []string{"verb", "result"}),
	}
	// Read from the slice cache when scraped: what kube-scheduler can
	// allocate from, whoever wrote it last.
	p.devices = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "capscale", Subsystem: "extender", Name: "published_devices",
		Help: "Underlay-IP devices (driver " + Driver + ") in the ResourceSlices the device publisher last wrote or found, over all nodes.",
	}, p.publishedDevices)
	p.unservedNodes = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "capscale", Subsystem: "extender", Name: "unserved_nodes",
		Help: "Nodes whose pool of " + Driver + " publishes no free device because no Ready pod of the kubelet plugin runs there (--kubelet-plugin-selector), on the replica that publishes; 0 on the others and without the flag.",
	}, p.unserved.count)
	if p.o.InUse == nil {
		p.o.InUse = func(string) int64 { return 0 }
	}
	if p.o.Drawn == nil {
		p.o.Drawn = func(string) int64 { return 0 }
	}
	if p.o.Unlisted == nil {
		p.o.Unlisted = func(string) int64 { return 0 }
	}
	if r := o.Registerer; r != nil {
		for _, c := range []prometheus.Collector{p.writes, p.devices, p.unservedNodes} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("registering the device publisher's metrics: %w", err)
			}
		}
	}
	p.slices = resourceinformers.NewFilteredResourceSliceInformer(client, 0, cache.Indexers{byPool: slicePool},
		func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.driver", Driver).String()
		})
	p.claims = resourceinformers.NewResourceClaimInformer(client, metav1.NamespaceAll, 0, cache.Indexers{byPool: claimPools})
	if err := p.claims.SetTransform(compactClaim); err != nil {
		return nil, fmt.Errorf("setting the claim cache transform: %w", err)
	}
	p.synced = []cache.InformerSynced{nodes.Informer().HasSynced, p.slices.HasSynced, p.claims.HasSynced}
	if o.InUseSynced != nil {
		p.synced = append(p.synced, o.InUseSynced)
	}
	if o.PluginSelector != nil {
		var err error
		if p.plugins, err = pluginPodInformer(client, o.PluginNamespace, o.PluginSelector); err != nil {
			return nil, err
		}
		p.synced = append(p.synced, p.plugins.HasSynced)
		// A plugin pod that starts, turns Ready or not, or goes: its node
		// is looked at again.
		if _, err := p.plugins.AddEventHandler(podNodeHandler(p.Enqueue)); err != nil {
			return nil, fmt.Errorf("adding the device publisher's kubelet plugin pod handler: %w", err)
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: p.enqueueNode,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := cur.(*v1.Node)
			if !ok1 || !ok2 || o.UID != n.UID || !equality.Semantic.DeepEqual(o.Annotations, n.Annotations) || !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
				!equality.Semantic.DeepEqual(o.Status.DeclaredFeatures, n.Status.DeclaredFeatures) {
				p.enqueueNode(cur)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("adding the device publisher's node handler: %w", err)
	}
	// A slice written by anyone, or removed, is looked at again.
	if _, err := p.slices.AddEventHandler(poolHandler(p.Enqueue, slicePool)); err != nil {
		return nil, fmt.Errorf("adding the device publisher's slice handler: %w", err)
	}
	// An allocation or a deallocation can change what a node publishes only
	// once its budget fell below what was allocated there; looking again
	// costs a comparison.
	if _, err := p.claims.AddEventHandler(poolHandler(p.Enqueue, claimPools)); err != nil {
		return nil, fmt.Errorf("adding the device publisher's claim handler: %w", err)
	}
	return p, nil
}

// publishedDevices counts the devices of the cached slices of Driver.
func (p *Publisher) publishedDevices() float64 {
	if p.slices == nil {
		return 0
	}
	n := 0
	for _, o := range p.slices.GetStore().List() {
		if s, ok := o.(*resourcev1.ResourceSlice); ok && s.Spec.Driver == Driver {
			n += len(s.Spec.Devices)
		}
	}
	return float64(n)
}

// Start runs the publisher's own informers until ctx is done.
func (p *Publisher) Start(ctx context.Context) {
	go p.slices.RunWithContext(ctx)
	go p.claims.RunWithContext(ctx)
	if p.plugins != nil {
		go p.plugins.RunWithContext(ctx)
	}
}

// UsageChanged is told that the pods on node moved (the extender's Tracker):
// an invalid node's budget, a draws-all node's and one whose IPAM reports
// its IPs follow them.
func (p *Publisher) UsageChanged(node string) { p.Enqueue(node) }

// Enqueue queues node while leading.
func (p *Publisher) Enqueue(node string) {
	if q := p.queue.Load(); q != nil {
		(*q).Add(node)
	}
}

func (p *Publisher) enqueueNode(obj any) {
	if n, ok := obj.(*v1.Node); ok {
		p.Enqueue(n.Name)
	}
}

// Run publishes until ctx is done; once per leadership term.
func (p *Publisher) Run(ctx context.Context) {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "device-publisher"})
	defer q.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return
	}
	p.queue.Store(&q)
	defer p.queue.CompareAndSwap(&q, nil)
	// Only the leader's count is current: a replica that stops leading
	// says 0, so that summing over replicas counts each node once.
	defer p.unserved.reset()
	all, err := p.nodes.List(labels.Everything())
	if err == nil {
		for _, n := range all {
			q.Add(n.Name)
		}
	}
	// Pools of nodes that are gone: their owner reference lets the garbage
	// collector remove them, this covers a collector that is behind.
	for _, k := range p.slices.GetIndexer().ListIndexFuncValues(byPool) {
		q.Add(k)
	}
	klog.InfoS("Publishing underlay IPs as DRA devices", "driver", Driver, "nodes", len(all))
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	sync := func(ctx context.Context, name string) (time.Duration, error) { return 0, p.sync(ctx, name) }
	for kube.ProcessNext(ctx, q, sync, "Publishing underlay-IP devices failed, retrying", "node") {
	}
}
