package capacitysource

import (
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/kube"
)

// evaluatedUsed is what a usedFrom informer caches of an object: its
// identity and its UsedResult (an IPPool lists every allocation; the mirror
// needs one count).
type evaluatedUsed struct {
	metav1.ObjectMeta
	UsedResult
}

func (e *evaluatedUsed) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies e; nothing in it is ever modified.
func (e *evaluatedUsed) DeepCopyObject() runtime.Object { c := *e; return &c }

// watchUsedFrom gives si the informer of its source's usedFrom resource,
// indexed by node, telling the View's user the nodes an object maps to
// when its count or its nodes change. Until it has synced nothing is
// mirrored, as for the source's own resource.
func (v *View) watchUsedFrom(si *sourceInformer) error {
	u := si.src.UsedFrom
	if u == nil {
		return nil
	}
	si.usedFactory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(v.dyn, 0, u.Namespace, nil)
	si.used = si.usedFactory.ForResource(u.Resource.GVR()).Informer()
	name := si.src.Name
	if err := si.used.SetTransform(func(obj any) (any, error) {
		o, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		r := EvaluateUsedFrom(u, o.GetNamespace(), o.GetName(), o.Object)
		if r.NodeErr != "" {
			klog.ErrorS(nil, "Capacity source's usedFrom object maps to no node", "source", name, "object", r.Ref, "reason", r.NodeErr)
		}
		return &evaluatedUsed{
			ObjectMeta: metav1.ObjectMeta{Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion()},
			UsedResult: r,
		}, nil
	}); err != nil {
		return err
	}
	if err := si.used.AddIndexers(cache.Indexers{nodeIndex: func(obj any) ([]string, error) {
		if e, ok := obj.(*evaluatedUsed); ok {
			return e.Nodes, nil
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	if err := si.used.SetWatchErrorHandlerWithContext(watchErrors(name, "its usedFrom resource", u.Resource)); err != nil {
		return err
	}
	enqueue := func(obj any) {
		if e, ok := obj.(*evaluatedUsed); ok && v.changed != nil {
			for _, n := range e.Nodes {
				v.changed(n)
			}
		}
	}
	reg, err := si.used.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(o, n any) {
			oe, ok1 := o.(*evaluatedUsed)
			ne, ok2 := n.(*evaluatedUsed)
			if ok1 && ok2 && reflect.DeepEqual(oe.UsedResult, ne.UsedResult) {
				return
			}
			enqueue(o)
			enqueue(n)
		},
		DeleteFunc: func(obj any) { enqueue(kube.Deleted(obj)) },
	})
	if err != nil {
		return err
	}
	v.synced = append(v.synced, reg.HasSynced)
	return nil
}

// usedFromOf is what si's usedFrom objects report of node.
func (si *sourceInformer) usedFromOf(node string) []UsedResult {
	objs, _ := si.used.GetIndexer().ByIndex(nodeIndex, node)
	out := make([]UsedResult, 0, len(objs))
	for _, o := range objs {
		if e, ok := o.(*evaluatedUsed); ok {
			out = append(out, e.UsedResult.ForNode(node))
		}
	}
	return out
}

// withUsedFrom applies WithUsedFrom for the source that decided want, if
// it reads a usedFrom resource, joined by the keys its object gives node.
func (v *View) withUsedFrom(want Mirror, node string) Mirror {
	src := sourceOf(want)
	for _, si := range v.sources {
		if si.src.Name == src && si.used != nil {
			return WithUsedFrom(want, si.joinFor(node), si.usedFromOf(node))
		}
	}
	return want
}

// joinFor is the Join of node's object of si. A valid mirror has exactly
// one; with none or several the capacity is invalid and WithUsedFrom
// leaves it alone.
func (si *sourceInformer) joinFor(node string) Join {
	keyed := si.src.UsedFrom.SourceKey != nil
	objs, _ := si.inf.GetIndexer().ByIndex(nodeIndex, node)
	if len(objs) != 1 {
		return Join{Keyed: keyed}
	}
	e, ok := objs[0].(*evaluated)
	if !ok {
		return Join{Keyed: keyed}
	}
	return e.JoinFor(keyed)
}
