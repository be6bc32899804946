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
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/retry"
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
//
// The plugin then binds the pod itself, at once: handed to DefaultBinder,
// the bind would wait on the scheduler's client rate limiter, which it
// shares with every status patch, and a capacity lowered during that wait
// (seconds, on a loaded plane) would not be seen. The pace is kept before
// the reads instead, one token a bind at the scheduler's QPS and burst.

// bindStateKey is where Reserve leaves what the check at bind needs.
const bindStateKey fwk.StateKey = "Reserve" + Name

// bindState is the chosen node as this cycle saw it: the pods there and
// their requests, without the pod being placed.
type bindState struct{ node fwk.NodeInfo }

// Clone implements fwk.StateData: the snapshot is never modified.
func (s bindState) Clone() fwk.StateData { return s }

// nodeMeta reads a Node's annotations and labels, and the pods bound to
// it, from the apiserver, and binds a pod there.
type nodeMeta interface {
	// wait blocks until the binds' pace allows one more.
	wait(ctx context.Context) error
	get(ctx context.Context, name string) (annotations, labels map[string]string, err error)
	// podsOn returns the pods bound to node that have not ended, whole,
	// except those whose UID known reports: the scheduler's view has them.
	podsOn(ctx context.Context, node string, known func(types.UID) bool) ([]v1.Pod, error)
	bind(ctx context.Context, pod *v1.Pod, node string) error
}

// metaReader is nodeMeta over a metadata client (the check needs only the
// Node's annotations and labels, and only the pods' UIDs until one is
// missing from the view) and a pods client.
type metaReader struct {
	c    metadata.Interface
	pods kubernetes.Interface
	pace flowcontrol.RateLimiter
}

func (r metaReader) wait(ctx context.Context) error { return r.pace.Wait(ctx) }

// bind posts the pod's Binding, retried on the errors DefaultBinder
// retries (kube-scheduler's util.Retriable, v1.37.2).
func (r metaReader) bind(ctx context.Context, pod *v1.Pod, node string) error {
	b := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     v1.ObjectReference{Kind: "Node", Name: node},
	}
	return retry.OnError(retry.DefaultBackoff, retriable, func() error {
		return r.pods.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{})
	})
}

func retriable(err error) bool {
	return apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || utilnet.IsConnectionRefused(err)
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
// Its requests wait on no client rate limiter, so that nothing stands
// between the reads and the bind; wait paces the binds instead, at the
// config's QPS and burst (client-go's defaults when unset).
func newMetaReader(fh fwk.Handle) (nodeMeta, error) {
	if fh == nil || fh.KubeConfig() == nil {
		return nil, nil
	}
	cfg := rest.AddUserAgent(rest.CopyConfig(fh.KubeConfig()), Name+"-bind")
	qps, burst := cfg.QPS, cfg.Burst
	if qps == 0 {
		qps = rest.DefaultQPS
	}
	if burst == 0 {
		burst = rest.DefaultBurst
	}
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	c, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	pods, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var pace flowcontrol.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	if qps > 0 {
		pace = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	}
	return metaReader{c: c, pods: pods, pace: pace}, nil
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

// Bind binds the pod once the node's capacity read now still fits it,
// and refuses the bind otherwise; a pod that takes no IP it leaves to the
// next bind plugin (DefaultBinder) with Skip. The Node is read last, after
// the list, so that the capacity the bind rests on is the newest one.
func (pl *Plugin) Bind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	s, err := state.Read(bindStateKey)
	if err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	ni := s.(bindState).node
	// The pace may hold a burst's binds for long; the timeout is the
	// requests' own, as DefaultBinder's wait on its limiter has none.
	if err := pl.fresh.wait(ctx); err != nil {
		return fwk.AsStatus(fmt.Errorf("waiting to bind to node %s: %w", nodeName, err))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	seen := inView(ni, pod.UID)
	bound, err := pl.fresh.podsOn(ctx, nodeName, func(u types.UID) bool { return seen[u] })
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("listing node %s's pods before the bind: %w", nodeName, err))
	}
	read := time.Now()
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
	ch := unseen(pl.charges(ni, c), seen, bound, c)
	v := fit(underlay.Charge(need(state, pod), underlay.PodNetwork(pod), c.DrawsAll), c, underlay.Charged(ch, c.IPAM))
	logger := klog.FromContext(ctx)
	if v.code != fwk.Success {
		logger.V(2).Info("Node's underlay IP capacity changed since the scheduler read it; not binding",
			"pod", klog.KObj(pod), "node", nodeName, "reason", v.reason)
		return fwk.NewStatus(fwk.Unschedulable, "node "+nodeName+" changed since the scheduler read it: "+v.reason)
	}
	if err := pl.fresh.bind(ctx, pod, nodeName); err != nil {
		return fwk.AsStatus(fmt.Errorf("binding to node %s: %w", nodeName, err))
	}
	// A capacity lowered between the read and the bind is not seen: say
	// when that window was long.
	if d := time.Since(read); d > time.Second {
		logger.V(2).Info("Slow bind: a capacity lowered between the read and the bind would not have been seen", "pod", klog.KObj(pod), "node", nodeName, "readToBound", d)
	}
	return nil
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
