package workload

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/kube"
)

// TrimForCache is an informer transform: on top of dropping managedFields
// (kube.DropManagedFields), it keeps of a Pod only what the capacity
// calculator reads — its spec and phase — because the pod informer watches
// every pod of the cluster and its status and annotations are most of its
// size. Other objects pass through unchanged apart from managedFields.
func TrimForCache(obj any) (any, error) {
	obj, err := kube.DropManagedFields(obj)
	if err != nil {
		return obj, err
	}
	if p, ok := obj.(*corev1.Pod); ok {
		p.Annotations = nil
		p.Status = corev1.PodStatus{Phase: p.Status.Phase}
	}
	return obj, nil
}
