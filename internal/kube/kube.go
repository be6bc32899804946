// Package kube builds Kubernetes clients and informer factories the way every
// capscale component wants them: protobuf to the apiserver, no resync, and
// managedFields dropped from cached objects.
package kube

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig loads a kubeconfig file, or the in-cluster config when path is
// empty, and names the client after the component.
func RESTConfig(path, component string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if path == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %q: %w", path, err)
	}
	cfg.UserAgent = "capscale-" + component
	return cfg, nil
}

// Clientset returns a clientset that speaks protobuf for built-in types.
func Clientset(cfg *rest.Config) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("creating clientset: %w", err)
	}
	return cs, nil
}

// InformerFactory returns a shared informer factory with resync disabled and
// the managedFields transform installed.
func InformerFactory(cs kubernetes.Interface, opts ...informers.SharedInformerOption) informers.SharedInformerFactory {
	opts = append([]informers.SharedInformerOption{informers.WithTransform(DropManagedFields)}, opts...)
	return informers.NewSharedInformerFactoryWithOptions(cs, time.Duration(0), opts...)
}

// DropManagedFields is a cache transform: managedFields are often the largest
// part of an object and no capscale component reads them.
func DropManagedFields(obj interface{}) (interface{}, error) {
	if a, err := meta.Accessor(obj); err == nil && a.GetManagedFields() != nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// nonTerminalPods selects the pods that are not finished, as kube-scheduler's
// own pod informer does: a pod that finishes leaves the cache as a delete.
const nonTerminalPods = "status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed)

// boundPods selects the non-terminal pods that are bound to a node: a pod
// enters the cache as an add when it is bound, and a pending pod's create
// and status writes never reach the watcher.
const boundPods = "spec.nodeName!=," + nonTerminalPods

// pendingPods selects the non-terminal pods no node holds yet.
const pendingPods = "spec.nodeName=," + nonTerminalPods

// PendingPodInformer is an informer of the metadata of the pods not yet
// bound (the apiserver sends metadata only: a fraction of a pod's decode
// cost), caching transform's result for each. It belongs to no factory:
// the caller runs it.
func PendingPodInformer(mc metadata.Interface, transform cache.TransformFunc) (cache.SharedIndexInformer, error) {
	inf := metadatainformer.NewFilteredMetadataInformer(mc, corev1.SchemeGroupVersion.WithResource("pods"), metav1.NamespaceAll, 0,
		cache.Indexers{}, func(o *metav1.ListOptions) { o.FieldSelector = pendingPods }).Informer()
	if err := inf.SetTransform(transform); err != nil {
		return nil, fmt.Errorf("setting the pending pod cache transform: %w", err)
	}
	return inf, nil
}

// NonTerminalPodInformer returns factory's pod informer, restricted to
// non-terminal pods and caching transform's result for each pod (it replaces
// the factory's transform). Call it before the factory starts.
func NonTerminalPodInformer(factory informers.SharedInformerFactory, transform cache.TransformFunc) (cache.SharedIndexInformer, error) {
	return podInformer(factory, nonTerminalPods, transform)
}

// BoundPodInformer is NonTerminalPodInformer for the pods bound to a node
// only, for a component that has no use for pending pods.
func BoundPodInformer(factory informers.SharedInformerFactory, transform cache.TransformFunc) (cache.SharedIndexInformer, error) {
	return podInformer(factory, boundPods, transform)
}

func podInformer(factory informers.SharedInformerFactory, selector string, transform cache.TransformFunc) (cache.SharedIndexInformer, error) {
	inf := factory.InformerFor(&corev1.Pod{}, func(cs kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredPodInformer(cs, metav1.NamespaceAll, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			func(o *metav1.ListOptions) { o.FieldSelector = selector })
	})
	if err := inf.SetTransform(transform); err != nil {
		return nil, fmt.Errorf("setting the pod cache transform: %w", err)
	}
	return inf, nil
}

// Deleted is the object a delete event carries, unwrapped from the
// tombstone an informer sends for a deletion it missed while its watch was
// down. Every delete handler in capscale calls it.
func Deleted(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}
