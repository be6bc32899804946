package capacitysource

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/kube"
)

// nodeIndex indexes a source's objects by the node they map to.
const nodeIndex = "node"

// View is what the capacity sources say of each node: their objects (and
// usedFrom objects), evaluated on arrival and indexed by the node they map
// to. It holds no Node: its user asks for a node's Mirror with the node's
// labels, and is told the names of the nodes whose answer may have changed.
// The mirror onto the Node is its user; a scheduler reading the IPAM's
// objects itself would be another, with the same rule
// (docs/design/capacity-mirror.md).
type View struct {
	dyn     dynamic.Interface
	metrics *Metrics
	// changed is told each node whose Mirror may have changed.
	changed func(node string)
	sources []*sourceInformer
	synced  []cache.InformerSynced
}

type sourceInformer struct {
	src     *Compiled
	factory dynamicinformer.DynamicSharedInformerFactory
	inf     cache.SharedIndexInformer
	// usedFactory and used watch the source's usedFrom resource; nil
	// without one (mirror_usedfrom.go).
	usedFactory dynamicinformer.DynamicSharedInformerFactory
	used        cache.SharedIndexInformer
}

// evaluated is what a source's informer caches of an object: its identity
// and its Result. Evaluating on arrival (the informer's transform) runs the
// expressions once per object change and keeps ~200 bytes instead of the
// object: a CiliumNode of an ENI node is kilobytes, and there is one per
// node.
type evaluated struct {
	metav1.ObjectMeta
	Result
}

func (e *evaluated) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies e; nothing in it is ever modified.
func (e *evaluated) DeepCopyObject() runtime.Object { c := *e; return &c }

// NewView builds the sources' informers; Start starts them. changed is
// called from the informers' handlers.
func NewView(dyn dynamic.Interface, sources []*Compiled, metrics *Metrics, changed func(node string)) (*View, error) {
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	v := &View{dyn: dyn, metrics: metrics, changed: changed}
	for _, src := range sources {
		si := &sourceInformer{src: src}
		si.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, src.Namespace, nil)
		si.inf = si.factory.ForResource(src.Resource.GVR()).Informer()
		if err := si.inf.SetTransform(v.evaluate(src)); err != nil {
			return nil, err
		}
		if err := si.inf.AddIndexers(cache.Indexers{nodeIndex: byNode}); err != nil {
			return nil, err
		}
		if err := si.inf.SetWatchErrorHandlerWithContext(watchErrors(src.Name, "its resource", src.Resource)); err != nil {
			return nil, err
		}
		reg, err := si.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { v.resultChanged(obj) },
			UpdateFunc: func(o, n any) {
				oe, ok1 := o.(*evaluated)
				ne, ok2 := n.(*evaluated)
				if ok1 && ok2 && oe.Result.Equal(ne.Result) {
					// A status change that moves neither the node nor
					// the count: nothing to mirror.
					return
				}
				v.resultChanged(o)
				v.resultChanged(n)
			},
			DeleteFunc: func(obj any) { v.resultChanged(kube.Deleted(obj)) },
		})
		if err != nil {
			return nil, err
		}
		v.synced = append(v.synced, reg.HasSynced)
		if err := v.watchUsedFrom(si); err != nil {
			return nil, err
		}
		v.sources = append(v.sources, si)
	}
	return v, nil
}

// Start starts the informers until stop is closed.
func (v *View) Start(stop <-chan struct{}) {
	for _, s := range v.sources {
		s.factory.Start(stop)
		if s.usedFactory != nil {
			s.usedFactory.Start(stop)
		}
	}
}

// Shutdown waits for the informers Start started to stop.
func (v *View) Shutdown() {
	for _, s := range v.sources {
		s.factory.Shutdown()
		if s.usedFactory != nil {
			s.usedFactory.Shutdown()
		}
	}
}

// Synced are the handlers' HasSynced: until all are true, the View has not
// seen every object, and nothing it says may be written.
func (v *View) Synced() []cache.InformerSynced { return v.synced }

// Len is the number of sources.
func (v *View) Len() int { return len(v.sources) }

// Mirror is what the sources say of the node named node with nodeLabels:
// Want over their objects, the IPAM's report of its usedFrom folded in,
// and Uncovered when no source covers it.
func (v *View) Mirror(node string, nodeLabels map[string]string) Mirror {
	want := v.withUsedFrom(Want(v.coverage(node, nodeLabels)), node)
	if want == (Mirror{}) {
		// Read, and no source covers it: the mark that ends the rule's
		// wait (underlay.Rule.AwaitSource).
		return Uncovered
	}
	return want
}

// evaluate is a source informer's transform: the object's Result.
func (v *View) evaluate(src *Compiled) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		start := time.Now()
		r := Evaluate(src, u.GetNamespace(), u.GetName(), u.Object)
		v.metrics.evaluated(src.Name, r, time.Since(start))
		if r.NodeErr != "" {
			klog.ErrorS(nil, "Capacity source object maps to no node", "source", src.Name, "object", r.Ref, "reason", r.NodeErr)
		}
		return &evaluated{
			ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()},
			Result:     r,
		}, nil
	}
}

func byNode(obj any) ([]string, error) {
	if e, ok := obj.(*evaluated); ok {
		return e.MapsTo(), nil
	}
	return nil, nil
}

func (v *View) resultChanged(obj any) {
	if e, ok := obj.(*evaluated); ok && v.changed != nil {
		for _, n := range e.MapsTo() {
			v.changed(n)
		}
	}
}

// coverage reads what every source says of a node from the informers.
func (v *View) coverage(node string, nodeLabels map[string]string) []Coverage {
	cov := make([]Coverage, len(v.sources))
	for i, s := range v.sources {
		cov[i] = Coverage{Source: s.src.Name, Resource: s.src.Resource.String(), Draws: s.src.Draws, Selects: s.src.Selector != nil,
			Selected: s.src.Selector != nil && s.src.Selector.Matches(labels.Set(nodeLabels))}
		objs, _ := s.inf.GetIndexer().ByIndex(nodeIndex, node)
		for _, o := range objs {
			if e, ok := o.(*evaluated); ok {
				cov[i].Objects = append(cov[i].Objects, e.Result)
			}
		}
	}
	return cov
}

// watchErrors is a source's informer's watch error handler: a resource
// that is not there or not readable is said plainly, once per failed list
// or watch, before client-go's own handling (its backoff).
func watchErrors(source, what string, res Resource) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			klog.FromContext(ctx).Error(err, "Capacity source cannot list or watch "+what+" (is its CRD installed, and may this component's ServiceAccount read it?); its nodes stay not read yet until it can",
				"source", source, "resource", res.String())
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}
}
