package schedplugin

import (
	"context"
	"fmt"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/underlay"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "UnderlayIP"

// stateKey is where PreFilter leaves the pod's need in the CycleState.
const stateKey fwk.StateKey = "PreFilter" + Name

// Plugin is the underlay-IP rule as a kube-scheduler framework plugin.
type Plugin struct {
	// rule is the capacity rule: the default capacity and whether to wait
	// for the capacity-source mirror.
	rule underlay.Rule
	// caps remembers each node's capacity reading (capacity.go); nil (a
	// Plugin built without New) reads the Node every time.
	caps *capacities
	// drawsAll is set once a node that draws all has been read: only then
	// does the exit of a pod that asked for no IP free one (hints.go).
	drawsAll atomic.Bool
	// holds are force-deleted pods' IPs their nodes may still hold
	// (holds.go); nil without the handle's informers.
	holds *holds
	// pods and nodeInfos are the handle's pod lister and snapshot, which
	// PostFilter reads (postfilter.go); nil without the handle's informers.
	pods      corelisters.PodLister
	nodeInfos nodeInfoGetter
	// fresh reads the chosen Node from the apiserver for the check at bind
	// (bindcheck.go); nil without the handle's client config.
	fresh nodeMeta
	// sourced is the plugin's own read of the capacity sources
	// (sourced.go); nil unless the args name them.
	sourced *sourced
}

var (
	_ fwk.PreFilterPlugin   = (*Plugin)(nil)
	_ fwk.FilterPlugin      = (*Plugin)(nil)
	_ fwk.PostFilterPlugin  = (*Plugin)(nil)
	_ fwk.PreScorePlugin    = (*Plugin)(nil)
	_ fwk.ScorePlugin       = (*Plugin)(nil)
	_ fwk.ScoreExtensions   = (*Plugin)(nil)
	_ fwk.EnqueueExtensions = (*Plugin)(nil)
	_ fwk.SignPlugin        = (*Plugin)(nil)
	_ fwk.ReservePlugin     = (*Plugin)(nil)
	_ fwk.BindPlugin        = (*Plugin)(nil)
)

// New is the plugin's factory (the framework's PluginFactory signature):
// it decodes the profile's args and, from the handle, follows pod
// deletions to hold a force-deleted pod's IPs (holds.go).
func New(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	pl := &Plugin{rule: args.Rule(), caps: newCapacities()}
	if pl.holds, err = newHoldsFor(fh, pl.drawsAll.Load); err != nil {
		return nil, fmt.Errorf("%s: following pod deletions: %w", Name, err)
	}
	pl.postFilterInputs(fh)
	if pl.fresh, err = newMetaReader(fh); err != nil {
		return nil, fmt.Errorf("%s: the client for the check at bind: %w", Name, err)
	}
	if pl.sourced, err = newSourcedFor(ctx, fh, args); err != nil {
		return nil, fmt.Errorf("%s: reading the capacity sources: %w", Name, err)
	}
	if pl.sourced != nil {
		pl.caps = newStampedCapacities()
	}
	return pl, nil
}

// NewWithoutMemo is New without the capacity memo: Filter and Score read
// each Node's annotation and label every time. It exists for benche2e's
// --mode plugin-memo, which measures what the memo saves (issue 41).
func NewWithoutMemo(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	pl, err := New(ctx, obj, h)
	if err != nil {
		return nil, err
	}
	pl.(*Plugin).caps = nil
	return pl, nil
}

// Name returns Name.
func (pl *Plugin) Name() string { return Name }

// needState is the pod's need, computed once per scheduling cycle. It never
// changes within the cycle, so Clone shares it.
type needState int64

// Clone implements fwk.StateData.
func (s needState) Clone() fwk.StateData { return s }

// PreFilter computes the pod's need once. A pod that needs no underlay IP
// gets Skip (the framework then skips Filter for it) unless it is on the
// pod network and some node draws all: there it is charged one IP
// (underlay.Charge), so Filter must see it.
func (pl *Plugin) PreFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	need := underlay.PodNeed(pod)
	if need == 0 && !(underlay.PodNetwork(pod) && pl.anyDrawsAll(nodes)) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	state.Write(stateKey, needState(need))
	pl.caps.sync(nodes)
	return nil, nil
}

// PreFilterExtensions returns nil: the framework adds a nominated pod to,
// or removes a preemption victim from, the NodeInfo it then hands to Filter,
// and Filter reads the IPs in use from that NodeInfo, so there is nothing
// for AddPod or RemovePod to track (docs/design/plugin-prefilter-extensions.md).
func (pl *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// need is the pod's need from PreFilter, or computed again when the cycle
// has none (PreFilter skipped the pod, or a caller went straight to Score).
func need(state fwk.CycleState, pod *v1.Pod) int64 {
	if state != nil {
		if s, err := state.Read(stateKey); err == nil {
			if n, ok := s.(needState); ok {
				return int64(n)
			}
		}
	}
	return underlay.PodNeed(pod)
}

// Filter admits the node when its free IPs cover the pod's need.
func (pl *Plugin) Filter(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	node := nodeInfo.Node()
	if node == nil {
		return fwk.AsStatus(fmt.Errorf("%s filter of pod %s: node not found", Name, klog.KObj(pod)))
	}
	c := pl.capacity(node)
	ch := pl.charges(nodeInfo, c)
	v := fit(underlay.Charge(need(state, pod), underlay.PodNetwork(pod), c.DrawsAll), c, underlay.Charged(ch, c.IPAM))
	if v.code == fwk.Success {
		return nil
	}
	if v.code == fwk.Unschedulable {
		v.reason += underlay.BeyondPods(ch, c.IPAM)
		if ch.Held > 0 {
			pl.holds.turnedAway(pod)
		}
	}
	return fwk.NewStatus(v.code, v.reason)
}

// PreScore skips Score for a pod that needs no underlay IP, so that such
// pods cost nothing more on capscale-scheduler than on kube-scheduler.
func (pl *Plugin) PreScore(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if need(state, pod) == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score is the node's free IPs; NormalizeScore ranks them.
func (pl *Plugin) Score(_ context.Context, _ fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	node := nodeInfo.Node()
	if node == nil {
		return 0, fwk.AsStatus(fmt.Errorf("%s score of pod %s: node not found", Name, klog.KObj(pod)))
	}
	c := pl.capacity(node)
	return underlay.Free(c, pl.charges(nodeInfo, c)), nil
}

// ScoreExtensions returns the plugin: it normalises its own scores.
func (pl *Plugin) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore gives the nodes with the most free IPs MaxScore, the
// others MinScore (see normalize).
func (pl *Plugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	normalize(scores)
	return nil
}

// SignPod keeps opportunistic batching (KEP-5598, on by default in v1.37)
// for pods that need no underlay IP and refuses it for those that do.
//
// A profile with a Filter or Score plugin that is not a SignPlugin loses
// batching for every pod, so the plugin must sign; the plugin plays no part
// for a pod that needs no IP, so such a pod signs with no fragment.
//
// An underlay pod is unsignable because a batch hint would rank it wrongly.
// When the node chosen for the previous pod of a batch no longer fits the
// next one, kube-scheduler pops the next node of the previous cycle's sorted
// list without scoring again, and NormalizeScore gave every node but the
// ones with the most free IPs the same MinScore: the order among them is
// the other plugins', not the free count. A normalisation that kept that
// order would have to give each count its own step larger than the other
// plugins' weighted sum (1300 points in the default profile), which 0-100
// cannot hold for more than a handful of counts. Exact "most free IPs
// first" is the plugin's promise; batching gave underlay pods no hint on
// kube-scheduler's default profiles anyway (docs/design/plugin-signpod.md).
func (pl *Plugin) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if underlay.PodNeed(pod) > 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods that need underlay IPs are not signable: a batch hint would rank nodes by the other plugins' scores, not by free IPs")
	}
	return nil, nil
}

// capacity is the capacity of node under the one rule.
func (pl *Plugin) capacity(node *v1.Node) underlay.Capacity {
	c := pl.caps.of(node, pl.read)
	if c.DrawsAll && !pl.drawsAll.Load() {
		pl.drawsAll.Store(true)
	}
	return c
}

// read reads node's capacity under the one rule: from the Node, with the
// mirror's annotations as the plugin's own read of the sources says where
// it reads them.
func (pl *Plugin) read(node *v1.Node) reading {
	if pl.sourced == nil {
		return reading{c: pl.rule.Capacity(node.Annotations, node.Labels)}
	}
	a, v, gen := pl.sourced.annotations(node)
	return reading{c: pl.rule.Capacity(a, node.Labels), v: v, gen: gen}
}
