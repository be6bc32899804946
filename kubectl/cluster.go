package kubectl

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"
)

// unfinished leaves out the pods that hold nothing whatever they request.
const unfinished = "status.phase!=Succeeded,status.phase!=Failed"

// readCluster lists the nodes (those matching selector) and every
// unfinished pod, as the user, a page at a time so that a large cluster
// costs several small answers rather than one huge one.
func readCluster(ctx context.Context, c kubernetes.Interface, selector string) ([]*v1.Node, []*v1.Pod, error) {
	var nodes []*v1.Node
	np := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return c.CoreV1().Nodes().List(ctx, o)
	})
	err := np.EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, func(o runtime.Object) error {
		nodes = append(nodes, o.(*v1.Node))
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	var pods []*v1.Pod
	pp := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return c.CoreV1().Pods(v1.NamespaceAll).List(ctx, o)
	})
	err = pp.EachListItem(ctx, metav1.ListOptions{FieldSelector: unfinished}, func(o runtime.Object) error {
		pods = append(pods, o.(*v1.Pod))
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	return nodes, pods, nil
}
