package schedplugin

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/underlay"
)

// The check at bind: the capacity Filter read is the scheduler's cached
// Node, which trails the apiserver by one watch event, and by seconds while
// that watch reconnects (after a kube-apiserver restart, client-go's
// reflector backs off up to 30 s, per watch). A capacity lowered in that gap
// (the IPAM's pool shrank, an operator's override) would still take pods.
// So before the bind, the chosen Node's metadata is read from the apiserver
// and the rule applied again to what the pods there hold; a capacity that
// no longer fits refuses the bind, and the pod is retried after its backoff
// (docs/design/plugin-bind-check.md says why Bind, not PreBind or Permit).
//
// The pods side trails too. The scheduler's cache counts its own binds at
// once, but not a pod another binder placed, a bind whose answer was lost
// though the apiserver had made it, or a bind the previous scheduler
// process sent just before it died; each shows up only when the pod watch
// delivers it, seconds later under load or after a reconnect. So the check
// also lists the node's pods from the apiserver and charges those its view
// lacks (unseen).

// bindStateKey is where Reserve leaves what the check at bind needs.
const bindStateKey fwk.StateKey = "Reserve" + Name

// bindState is the chosen node as this cycle saw it: the pods there and
// their requests, without the pod being placed.
type bindState struct{ node fwk.NodeInfo }

// Clone implements fwk.StateData: the snapshot is never modified.
func (s bindState) Clone() fwk.StateData { return s }

// nodeMeta reads a Node's annotations and labels, and the pods bound to
// it, from the apiserver.
type nodeMeta interface {
	get(ctx context.Context, name string) (annotations, labels map[string]string, err error)
	// podsOn returns the pods bound to node that have not ended, whole,
	// except those whose UID known reports: the scheduler's view has them.
	podsOn(ctx context.Context, node string, known func(types.UID) bool) ([]v1.Pod, error)
}

// metaReader is nodeMeta over a metadata client (the check needs only the
// Node's annotations and labels, and only the pods' UIDs until one is
// missing from the view) and a pods client.
type metaReader struct {
	c    metadata.Interface
	pods kubernetes.Interface
}

func (r metaReader) get(ctx context.Context, name string) (map[string]string, map[string]string, error) {
	m, err := r.c.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	return m.Annotations, m.Labels, nil
}

// podsOn lists the metadata of the pods bound to node that have not ended,
// a consistent read (no resourceVersion) that kube-apiserver answers from
// its watch cache, by the pods' spec.nodeName index, once that cache has
// caught up; then it reads whole only the pods known does not report,
// usually none. A pod gone or replaced since the list is left out.
func (r metaReader) podsOn(ctx context.Context, node string, known func(types.UID) bool) ([]v1.Pod, error) {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", node),
		fields.OneTermNotEqualSelector("status.phase", string(v1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(v1.PodFailed)))
	l, err := r.c.Resource(v1.SchemeGroupVersion.WithResource("pods")).Namespace(metav1.NamespaceAll).
		List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var out []v1.Pod
	for i := range l.Items {
		m := &l.Items[i]
		if known(m.UID) {
			continue
		}
		p, err := r.pods.CoreV1().Pods(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if p.UID == m.UID && p.Spec.NodeName == node {
			out = append(out, *p)
		}
	}
	return out, nil
}

// newMetaReader builds the reader from the scheduler's own client config; nil
// without one (a framework built in a test), and then Bind checks nothing.
// Its clients have a rate limit of their own, apart from the binds'.
func newMetaReader(fh fwk.Handle) (nodeMeta, error) {
	if fh == nil || fh.KubeConfig() == nil {
		return nil, nil
	}
	cfg := rest.AddUserAgent(rest.CopyConfig(fh.KubeConfig()), Name+"-bind-check")
	c, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	pods, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return metaReader{c: c, pods: pods}, nil
}

// Reserve keeps the chosen node's NodeInfo of this cycle for the check at
// bind; the binding cycle runs beside the next scheduling cycle, which
// replaces the snapshot, so it keeps a copy.
func (pl *Plugin) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if pl.fresh == nil || pl.nodeInfos == nil || !pl.takesIPs(state, pod) {
		return nil
	}
	ni, err := pl.nodeInfos.Get(nodeName)
	if err != nil || ni.Node() == nil {
		return nil // nothing to check against: Bind skips
	}
	state.Write(bindStateKey, bindState{ni.Snapshot()})
	return nil
}

// Unreserve has nothing to undo: the state dies with the cycle.
func (pl *Plugin) Unreserve(context.Context, fwk.CycleState, *v1.Pod, string) {}

// takesIPs reports whether the pod takes IPs anywhere: it needs some, or it
// is on the pod network while some node draws all.
func (pl *Plugin) takesIPs(state fwk.CycleState, pod *v1.Pod) bool {
	return need(state, pod) > 0 || pl.drawsAll.Load() && underlay.PodNetwork(pod)
}

// Bind never binds: it returns Skip, and the next bind plugin
// (DefaultBinder) binds, once the node's capacity read now still fits the
// pod; otherwise it refuses the bind.
func (pl *Plugin) Bind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	s, err := state.Read(bindStateKey)
	if err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	ni := s.(bindState).node
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	annotations, labels, err := pl.fresh.get(ctx, nodeName)
	if apierrors.IsNotFound(err) {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("node %s was deleted before the bind", nodeName))
	}
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("reading node %s's underlay IP capacity before the bind: %w", nodeName, err))
	}
	if pl.sourced != nil {
		annotations = pl.sourced.over(nodeName, annotations)
	}
	c := pl.rule.Capacity(annotations, labels)
	seen := inView(ni, pod.UID)
	bound, err := pl.fresh.podsOn(ctx, nodeName, func(u types.UID) bool { return seen[u] })
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("listing node %s's pods before the bind: %w", nodeName, err))
	}
	ch := unseen(pl.charges(ni, c), seen, bound, c)
	v := fit(underlay.Charge(need(state, pod), underlay.PodNetwork(pod), c.DrawsAll), c, underlay.Charged(ch, c.IPAM))
	if v.code == fwk.Success {
		return fwk.NewStatus(fwk.Skip)
	}
	klog.FromContext(ctx).V(2).Info("Node's underlay IP capacity changed since the scheduler read it; not binding",
		"pod", klog.KObj(pod), "node", nodeName, "reason", v.reason)
	return fwk.NewStatus(fwk.Unschedulable, "node "+nodeName+" changed since the scheduler read it: "+v.reason)
}

// inView is the set of pods the scheduler's view of the node holds, and
// the pod being bound: listed there, that one was bound already, and this
// bind fails.
func inView(ni fwk.NodeInfo, binding types.UID) map[types.UID]bool {
	seen := make(map[types.UID]bool, len(ni.GetPods())+1)
	for _, pi := range ni.GetPods() {
		if p := pi.GetPod(); p != nil {
			seen[p.UID] = true
		}
	}
	seen[binding] = true
	return seen
}

// unseen adds to ch what the pods bound to the node (bound, from the
// apiserver) take that are not in seen (inView), as charged counts a pod:
// its request, one IP more for a pod-network pod on a node that draws
// all, and as unlisted while it has no IP. A pod in the view but no
// longer listed stays counted: its exit frees the IP when the view sees it.
func unseen(ch underlay.Charges, seen map[types.UID]bool, bound []v1.Pod, c underlay.Capacity) underlay.Charges {
	for i := range bound {
		p := &bound[i]
		if seen[p.UID] || !underlay.Holds(p.Spec.NodeName, p.Status.Phase) {
			continue
		}
		own := underlay.PodNeed(p)
		if c.DrawsAll {
			own += underlay.Drawn(own, underlay.PodNetwork(p))
		}
		ch.Pods += own
		if c.IPAM.Reported && !underlay.Listed(p) {
			ch.Unlisted += own
		}
	}
	return ch
}
