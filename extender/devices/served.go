package devices

import (
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// A node's kubelet calls the kubelet plugin of Driver before it starts any
// pod whose claim holds its devices. With no plugin registered it refuses
// ("DRA driver ... is not registered",
// k8s.io/kubernetes@v1.37.2 pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go:280),
// records FailedPrepareDynamicResources and gives up that sync
// (pkg/kubelet/kuberuntime/kuberuntime_manager.go:1719-1728), to retry it
// at the next resync, 1 to 1.5 min later (pkg/kubelet/pod_workers.go:1529-1531):
// the pod is bound and stuck. And 30 s after a plugin went away the kubelet
// deletes the driver's slices of its node (pkg/kubelet/cm/dra/manager.go:75,
// defaultWipingDelay; plugin/dra_plugin_manager.go:504-537), which the
// publisher writes again at once. So, with PluginSelector set, a node is
// served only while a Ready pod of the plugin runs on it, and an unserved
// node publishes no free device: new pods wait, unbound, with
// kube-scheduler's own reason, and bind once the plugin is back.

// byNode indexes the plugin's pods by their node.
const byNode = "node"

// Serving reports whether pod, a pod of the kubelet plugin, serves its
// node: bound, running, not being deleted, and Ready. The plugin is Ready
// only once the kubelet registered it (extender/nodeplugin), so its
// readiness, which the kubelet itself writes, is the kubelet's word that
// it will call the plugin.
func Serving(pod *v1.Pod) bool {
	if pod == nil || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || pod.Status.Phase != v1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// Served reports whether a node whose plugin pods are pods is served: one
// of them serves it.
func Served(pods []*v1.Pod) bool {
	for _, p := range pods {
		if Serving(p) {
			return true
		}
	}
	return false
}

// pluginPodInformer watches the plugin's pods: namespace, label-selected,
// each reduced to what Serving reads, indexed by node.
func pluginPodInformer(client kubernetes.Interface, namespace string, selector labels.Selector) (cache.SharedIndexInformer, error) {
	inf := coreinformers.NewFilteredPodInformer(client, namespace, 0, cache.Indexers{byNode: podNode},
		func(lo *metav1.ListOptions) { lo.LabelSelector = selector.String() })
	if err := inf.SetTransform(compactPluginPod); err != nil {
		return nil, fmt.Errorf("setting the kubelet plugin pods' cache transform: %w", err)
	}
	return inf, nil
}

// podNode indexes a pod by its node.
func podNode(obj any) ([]string, error) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{p.Spec.NodeName}, nil
}

// compactPluginPod keeps of a pod what Serving reads.
func compactPluginPod(obj any) (any, error) {
	p, ok := obj.(*v1.Pod)
	if !ok {
		return obj, nil
	}
	out := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   v1.PodSpec{NodeName: p.Spec.NodeName},
		Status: v1.PodStatus{Phase: p.Status.Phase},
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			out.Status.Conditions = []v1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return out, nil
}

// podNodeHandler queues the node of a plugin pod, before and after a change.
func podNodeHandler(enqueue func(string)) cache.ResourceEventHandlerFuncs {
	return poolHandler(enqueue, podNode)
}

// unserved is the set of nodes held at no free device for want of the
// plugin; it logs each change.
type unserved struct {
	mu    sync.Mutex
	nodes map[string]bool
}

// set records whether node is unserved, and logs a change.
func (u *unserved) set(node string, held bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.nodes[node] == held {
		return
	}
	if held {
		if u.nodes == nil {
			u.nodes = map[string]bool{}
		}
		u.nodes[node] = true
		klog.InfoS("No Ready kubelet plugin on the node: publishing no free underlay-IP device there until it is back", "node", klog.KRef("", node), "driver", Driver)
		return
	}
	delete(u.nodes, node)
	klog.InfoS("The node's kubelet plugin is Ready: publishing its underlay-IP devices", "node", klog.KRef("", node), "driver", Driver)
}

// forget drops a node that is gone, silently.
func (u *unserved) forget(node string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.nodes, node)
}

// reset forgets every node.
func (u *unserved) reset() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.nodes = nil
}

// count is how many nodes are unserved.
func (u *unserved) count() float64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return float64(len(u.nodes))
}
