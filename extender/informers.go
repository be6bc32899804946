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

// PodInformer returns factory's pod informer restricted to non-terminal pods
// and caching only what the extender reads (StripPod replaces the factory's
// transform, which it subsumes). Call it before the factory starts.
func PodInformer(factory informers.SharedInformerFactory) (cache.SharedIndexInformer, error) {
	inf := factory.InformerFor(&v1.Pod{}, func(cs kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredPodInformer(cs, metav1.NamespaceAll, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			func(o *metav1.ListOptions) { o.FieldSelector = nonTerminalPods })
	})
	if err := inf.SetTransform(StripPod); err != nil {
		return nil, fmt.Errorf("setting the pod cache transform: %w", err)
	}
	return inf, nil
}

// StripPod is a cache transform that keeps of a pod only what the ledger and
// the binder read: identity, node, phase and the underlay IP requests. In a
// cluster of many pods the cache then costs a fraction of the full objects.
// Other objects pass through.
func StripPod(obj any) (any, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return obj, nil
	}
	out := &v1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec: v1.PodSpec{
			NodeName: pod.Spec.NodeName,
			Overhead: keepUnderlay(pod.Spec.Overhead),
		},
		Status: v1.PodStatus{Phase: pod.Status.Phase},
	}
	out.Spec.Containers = stripContainers(pod.Spec.Containers)
	out.Spec.InitContainers = stripContainers(pod.Spec.InitContainers)
	return out, nil
}

func stripContainers(in []v1.Container) []v1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]v1.Container, len(in))
	for i := range in {
		out[i] = v1.Container{
			Name:          in[i].Name,
			RestartPolicy: in[i].RestartPolicy,
			Resources: v1.ResourceRequirements{
				Requests: keepUnderlay(in[i].Resources.Requests),
				Limits:   keepUnderlay(in[i].Resources.Limits),
			},
		}
	}
	return out
}

func keepUnderlay(rl v1.ResourceList) v1.ResourceList {
	q, ok := rl[underlayResource]
	if !ok {
		return nil
	}
	return v1.ResourceList{underlayResource: q}
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
