package extender

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// nonTerminalPods selects the pods that can hold IPs, as kube-scheduler's own
// pod informer does: a pod that finishes leaves the cache as a delete.
const nonTerminalPods = "status.phase!=" + string(v1.PodSucceeded) + ",status.phase!=" + string(v1.PodFailed)

// PodInformer returns factory's pod informer restricted to non-terminal pods;
// the factory's transform (managedFields dropped) still applies.
func PodInformer(factory informers.SharedInformerFactory) cache.SharedIndexInformer {
	return factory.InformerFor(&v1.Pod{}, func(cs kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredPodInformer(cs, metav1.NamespaceAll, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			func(o *metav1.ListOptions) { o.FieldSelector = nonTerminalPods })
	})
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
	if pod, ok := obj.(*v1.Pod); ok {
		l.SetPod(pod)
	}
}

func (l *Ledger) onPodDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		klog.ErrorS(nil, "Unexpected object in pod delete event", "type", fmt.Sprintf("%T", obj))
		return
	}
	l.DeletePod(pod.UID)
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
