package extender

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// NodeInformer returns factory's node informer caching only what the
// extender binary reads of a Node (StripNode replaces the factory's
// transform, which it subsumes). Call it before the factory starts.
func NodeInformer(factory informers.SharedInformerFactory) (cache.SharedIndexInformer, error) {
	return nodeInformer(factory, StripNode)
}

// NodeInformerWithLabels is NodeInformer keeping every label too: the
// extender's own read of the capacity sources (--capacity-sources) matches
// their nodeSelectors against them.
func NodeInformerWithLabels(factory informers.SharedInformerFactory) (cache.SharedIndexInformer, error) {
	return nodeInformer(factory, func(obj any) (any, error) {
		if node, ok := obj.(*v1.Node); ok {
			c := CompactNode(node)
			c.Labels = node.Labels
			return c, nil
		}
		return obj, nil
	})
}

func nodeInformer(factory informers.SharedInformerFactory, transform cache.TransformFunc) (cache.SharedIndexInformer, error) {
	inf := factory.Core().V1().Nodes().Informer()
	if err := inf.SetTransform(transform); err != nil {
		return nil, fmt.Errorf("setting the node cache transform: %w", err)
	}
	return inf, nil
}

// nodeAnnotations and nodeLabels are the only ones anything in the extender
// binary reads: the capacity rule's (the per-node value, and the capacity
// source's that capscale-controller mirrors onto the Node, all of them:
// the publisher reading the sources itself writes them when they differ)
// and the publisher's marker.
var (
	nodeAnnotations = []string{names.UnderlayIPCapacityAnnotation, names.UnderlayIPSourceCapacityAnnotation,
		names.UnderlayIPSourceAnnotation, names.UnderlayIPPublishedAnnotation, names.UnderlayIPDrawsAnnotation,
		names.UnderlayIPSourceUsedAnnotation, names.UnderlayIPSourceMaxCapacityAnnotation}
	nodeLabels = []string{names.UnderlayIPCapacityLabel}
)

// CompactNode reduces node to what the ledger and the capacity publisher
// read: its identity (name, UID and resourceVersion, which an Event's
// involved object carries), capscale's annotations and label, and
// capscale.io/underlay-ip in status capacity and allocatable, and the
// startup taint capscale.io/underlay-ip-unpublished if the node has it
// (the publisher removes it), and the features the node declares (DRA
// mode's publisher reads DRAOptionalNodeOperations there). A real
// node's images, conditions and managedFields make it about 17 KiB, 85 MiB
// at 5000 nodes; none of it decides capacity.
func CompactNode(node *v1.Node) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion,
			Annotations: keepKeys(node.Annotations, nodeAnnotations),
			Labels:      keepKeys(node.Labels, nodeLabels),
		},
		Spec: v1.NodeSpec{Taints: keepStartupTaint(node.Spec.Taints)},
		Status: v1.NodeStatus{
			Capacity:    keepResource(node.Status.Capacity),
			Allocatable: keepResource(node.Status.Allocatable),
			// DRA mode's publisher: whether the kubelet may skip the
			// driver's node operations (a few short names).
			DeclaredFeatures: node.Status.DeclaredFeatures,
		},
	}
}

// StripNode is the node cache's transform: it replaces each *v1.Node with
// its CompactNode. Other objects (deletion tombstones) pass through.
func StripNode(obj any) (any, error) {
	if node, ok := obj.(*v1.Node); ok {
		return CompactNode(node), nil
	}
	return obj, nil
}

// keepKeys returns the entries of m under keys, nil when there are none: a
// presence check (the marker, an empty annotation) must see what it saw.
func keepKeys(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}

// keepResource returns rl's underlay-IP quantity alone, nil without one.
func keepResource(rl v1.ResourceList) v1.ResourceList {
	q, ok := rl[underlay.Resource]
	if !ok {
		return nil
	}
	return v1.ResourceList{underlay.Resource: q.DeepCopy()}
}

// keepStartupTaint returns taints' capscale.io/underlay-ip-unpublished
// alone, nil without it.
func keepStartupTaint(taints []v1.Taint) []v1.Taint {
	for _, t := range taints {
		if t.Key == names.UnderlayIPUnpublishedTaint {
			return []v1.Taint{t}
		}
	}
	return nil
}
