package kubectl

import (
	"context"
	"fmt"
	"io"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/capscale/capscale/internal/ipreport"
	"github.com/capscale/capscale/internal/names"
)

// unfinished leaves out the pods that hold nothing whatever they request.
const unfinished = "status.phase!=Succeeded,status.phase!=Failed"

// readCluster lists the nodes (those matching selector) and every
// unfinished pod, as the user, a page at a time so that a large cluster
// costs several small answers rather than one huge one.
func readCluster(ctx context.Context, c kubernetes.Interface, selector string) ([]*v1.Node, []*v1.Pod, error) {
	nodes, err := listNodes(ctx, c, selector)
	if err != nil {
		return nil, nil, err
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

// markedNamespaces lists the namespaces labelled capscale.io/underlay=true,
// whose pods the admission policy gives an underlay IP.
func markedNamespaces(ctx context.Context, c kubernetes.Interface) (map[string]bool, error) {
	list, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: names.UnderlayNamespaceLabel + "=true"})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces labelled %s=true: %w", names.UnderlayNamespaceLabel, err)
	}
	out := make(map[string]bool, len(list.Items))
	for _, ns := range list.Items {
		out[ns.Name] = true
	}
	return out, nil
}

// warnUncounted tells the user, on stderr, about the pods that hold an
// underlay IP nobody counts, naming the first ten.
func warnUncounted(w io.Writer, pods []ipreport.UncountedPod) {
	if len(pods) == 0 {
		return
	}
	const shown = 10
	named := make([]string, 0, min(len(pods), shown))
	for _, p := range pods[:min(len(pods), shown)] {
		named = append(named, p.Namespace+"/"+p.Name+" on "+p.Node)
	}
	more := ""
	if len(pods) > shown {
		more = fmt.Sprintf(" and %d more", len(pods)-shown)
	}
	fmt.Fprintf(w, "Warning: %d pods in namespaces labelled %s=true hold an underlay IP that nobody counts (not hostNetwork, no %s request; created before the admission policy?): %s%s. Re-create them (e.g. kubectl rollout restart) so that the policy gives them the request.\n",
		len(pods), names.UnderlayNamespaceLabel, names.UnderlayIPResource, strings.Join(named, ", "), more)
}

// listNodes lists the nodes matching selector as the user, a page at a
// time.
func listNodes(ctx context.Context, c kubernetes.Interface, selector string) ([]*v1.Node, error) {
	var nodes []*v1.Node
	np := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return c.CoreV1().Nodes().List(ctx, o)
	})
	err := np.EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, func(o runtime.Object) error {
		nodes = append(nodes, o.(*v1.Node))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return nodes, nil
}
