package extender

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/underlay"
)

// PodInformer returns factory's pod informer restricted to bound,
// non-terminal pods and caching only what the extender reads (StripPod
// replaces the factory's transform, which it subsumes). Call it before the
// factory starts.
//
// Only bound pods hold IPs. A pending pod's create, and the status writes
// kube-scheduler and the requeuer make while it waits, were a third or more
// of the pod events the extender decoded, for every pod in the cluster; what
// bind needs of a pending pod, filter remembers (Ledger.RememberNeed), and
// Waiting forgets a pending pod deleted unseen by its TTL or at the touch.
func PodInformer(factory informers.SharedInformerFactory) (cache.SharedIndexInformer, error) {
	return kube.BoundPodInformer(factory, StripPod)
}

// CachedPod is all the extender keeps of a pod: identity, node, phase and
// the underlay IPs it needs. A stripped v1.Pod still costs about 3 KB (its
// structs and resource maps); this costs a few hundred bytes, which is what
// makes 50,000 pods fit in the extender's memory budget.
type CachedPod struct {
	metav1.TypeMeta
	// Only Name, Namespace, UID, ResourceVersion and DeletionTimestamp.
	metav1.ObjectMeta
	NodeName string
	Phase    v1.PodPhase
	// Need is PodNeed of the full pod, computed once.
	Need int64
}

// DeepCopyObject makes CachedPod a runtime.Object, as informer caches expect.
func (p *CachedPod) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// Terminal reports whether the pod has finished (and so holds no IPs).
func (p *CachedPod) Terminal() bool {
	return p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed
}

// Compact reduces pod to what the ledger and the binder read.
func Compact(pod *v1.Pod) *CachedPod {
	return &CachedPod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp,
		},
		NodeName: pod.Spec.NodeName,
		Phase:    pod.Status.Phase,
		Need:     underlay.PodNeed(pod),
	}
}

// StripPod is the pod cache's transform: it replaces each *v1.Pod with its
// CachedPod. Other objects (deletion tombstones) pass through.
func StripPod(obj any) (any, error) {
	if pod, ok := obj.(*v1.Pod); ok {
		return Compact(pod), nil
	}
	return obj, nil
}

// Attach feeds the ledger from the pod and node informers. The returned
// function reports whether both handlers have received their informer's
// initial list, i.e. whether the ledger has been rebuilt: only then may the
// extender answer.
func (l *Ledger) Attach(pods, nodes cache.SharedIndexInformer) (synced func() bool, err error) {
	pr, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.onPod(obj) },
		UpdateFunc: func(_, obj any) { l.onPod(obj) },
		DeleteFunc: func(obj any) { l.onPodDelete(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("adding the ledger's pod event handler: %w", err)
	}
	nr, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.onNode(obj) },
		UpdateFunc: func(_, obj any) { l.onNode(obj) },
		DeleteFunc: func(obj any) { l.onNodeDelete(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("adding the ledger's node event handler: %w", err)
	}
	return func() bool { return pr.HasSynced() && nr.HasSynced() }, nil
}

func (l *Ledger) onPod(obj any) {
	switch pod := obj.(type) {
	case *CachedPod:
		l.SetCachedPod(pod)
	case *v1.Pod:
		l.SetPod(pod)
	}
}

func (l *Ledger) onPodDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	switch pod := obj.(type) {
	case *CachedPod:
		l.DeletePod(pod.UID)
	case *v1.Pod:
		l.DeletePod(pod.UID)
	default:
		klog.ErrorS(nil, "Unexpected object in pod delete event", "type", fmt.Sprintf("%T", obj))
	}
}

func (l *Ledger) onNode(obj any) {
	if node, ok := obj.(*v1.Node); ok {
		l.SetNode(node)
	}
}

func (l *Ledger) onNodeDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	node, ok := obj.(*v1.Node)
	if !ok {
		klog.ErrorS(nil, "Unexpected object in node delete event", "type", fmt.Sprintf("%T", obj))
		return
	}
	l.DeleteNode(node.Name)
}
