// Package sourced is the extender's own read of the capacity sources
// (capscale-extender --capacity-sources): the View capscale-controller's
// mirror writes from, held in the extender, so that its ledger counts,
// and native mode's publisher decides on, what the IPAM says now; the
// publisher writes the mirror's annotations in the same Node status patch
// as the capacity. In native mode a capacity change is then one Node write,
// not the mirror's patch and then the publisher's (issue 55 §6); the
// controller mirrors nothing in that mode.
package sourced

import (
	"context"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/controller/capacitysource"
)

// View is what Reader reads: capacitysource.View, or a test's.
type View interface {
	Start(stop <-chan struct{})
	Shutdown()
	Synced() []cache.InformerSynced
	Mirror(node string, nodeLabels map[string]string) capacitysource.Mirror
}

// Reader answers for each node what the sources say of it. Until the View
// and the Node informer have synced it answers the zero Mirror, so the
// rule counts every node not read yet (0 under --await-capacity-source).
type Reader struct {
	view  View
	nodes corelisters.NodeLister
	// synced: the View has seen every object, so Mirror answers from it;
	// told: every node has been told of once since, so what follows the
	// Reader (the ledger) has the sources' answer for each.
	synced, told atomic.Bool
	changed      []func(*v1.Node)
	gauge        prometheus.Gauge
}

// New returns a Reader of the nodes in nodes; its View is set by SetView
// (capacitysource.NewView takes the Reader's Changed).
func New(nodes corelisters.NodeLister, reg prometheus.Registerer) *Reader {
	r := &Reader{nodes: nodes, gauge: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "capscale_extender_capacity_sources_synced",
		Help: "1 once the extender has read its capacity sources' objects and every Node (--capacity-sources), else 0: until then it is not ready and publishes nothing.",
	})}
	if reg != nil {
		reg.MustRegister(r.gauge)
	}
	return r
}

// SetView sets the View read; before Run.
func (r *Reader) SetView(v View) { r.view = v }

// OnChange adds f, told of each node whose answer may have moved once the
// Reader has synced (and of every node then); before Run.
func (r *Reader) OnChange(f func(*v1.Node)) { r.changed = append(r.changed, f) }

// Mirror is what the sources say of n, the zero Mirror (not read) until
// the Reader has synced.
func (r *Reader) Mirror(n *v1.Node) capacitysource.Mirror {
	if !r.synced.Load() {
		return capacitysource.Mirror{}
	}
	return r.view.Mirror(n.Name, n.Labels)
}

// Over is n as the capacity rule reads it: its annotations with the
// sources' answer in the place of the mirror's. n is not modified.
func (r *Reader) Over(n *v1.Node) *v1.Node {
	c := *n
	c.Annotations = r.Mirror(n).Over(n.Annotations)
	return &c
}

// HasSynced reports whether the Reader answers from the sources and has
// told of every node once: before, the ledger may still count a node as
// not read, and a publisher would write what it has not counted.
func (r *Reader) HasSynced() bool { return r.told.Load() }

// Changed is the View's handler: node's answer may have moved.
func (r *Reader) Changed(node string) {
	if !r.synced.Load() {
		// The first read, at sync, covers it.
		return
	}
	n, err := r.nodes.Get(node)
	if err != nil {
		// Not a Node (yet): its Add reads it.
		return
	}
	r.tell(n)
}

func (r *Reader) tell(n *v1.Node) {
	for _, f := range r.changed {
		f(n)
	}
}

// Run starts the View, waits for it and for nodesSynced, then tells of
// every node and answers from the sources until ctx ends.
func (r *Reader) Run(ctx context.Context, nodesSynced cache.InformerSynced) {
	r.view.Start(ctx.Done())
	defer r.view.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), append(r.view.Synced(), nodesSynced)...) {
		return
	}
	r.synced.Store(true)
	nodes, err := r.nodes.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Listing nodes for the capacity sources' first read")
	}
	for _, n := range nodes {
		r.tell(n)
	}
	r.told.Store(true)
	r.gauge.Set(1)
	klog.InfoS("Capacity sources read", "nodes", len(nodes))
	<-ctx.Done()
}
