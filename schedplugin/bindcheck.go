package schedplugin

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// bindStateKey is where Reserve leaves what the check at bind needs.
const bindStateKey fwk.StateKey = "Reserve" + Name

// bindState is the chosen node as this cycle saw it: the pods there and
// their requests, without the pod being placed.
type bindState struct{ node fwk.NodeInfo }

// Clone implements fwk.StateData: the snapshot is never modified.
func (s bindState) Clone() fwk.StateData { return s }

// nodeMeta reads a Node's annotations and labels from the apiserver.
type nodeMeta interface {
	get(ctx context.Context, name string) (annotations, labels map[string]string, err error)
}

// metaReader is nodeMeta over a metadata client: the check needs only the
// annotations and labels, not the Node's status.
type metaReader struct{ c metadata.Interface }

func (r metaReader) get(ctx context.Context, name string) (map[string]string, map[string]string, error) {
	m, err := r.c.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	return m.Annotations, m.Labels, nil
}

// newMetaReader builds the reader from the scheduler's own client config; nil
// without one (a framework built in a test), and then Bind checks nothing.
func newMetaReader(fh fwk.Handle) (nodeMeta, error) {
	if fh == nil || fh.KubeConfig() == nil {
		return nil, nil
	}
	c, err := metadata.NewForConfig(rest.AddUserAgent(rest.CopyConfig(fh.KubeConfig()), Name+"-bind-check"))
	if err != nil {
		return nil, err
	}
	return metaReader{c}, nil
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
	v := fit(underlay.Charge(need(state, pod), underlay.PodNetwork(pod), c.DrawsAll), c, underlay.Charged(pl.charges(ni, c), c.IPAM))
	if v.code == fwk.Success {
		return fwk.NewStatus(fwk.Skip)
	}
	klog.FromContext(ctx).V(2).Info("Node's underlay IP capacity changed since the scheduler read it; not binding",
		"pod", klog.KObj(pod), "node", nodeName, "reason", v.reason)
	return fwk.NewStatus(fwk.Unschedulable, "node "+nodeName+" changed since the scheduler read it: "+v.reason)
}
