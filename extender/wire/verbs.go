package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/internal/underlay"
)

// verbs answer the scheduler's calls: they read the ledger, call the core's
// decisions (extender.Filter, extender.Scores, extender.Rescues), and count
// what a request decided: the metrics and the waiting-pod bookkeeping live
// here, where the request is handled, not in the ledger.
type verbs struct {
	ledger  *extender.Ledger
	waiting *extender.Waiting // nil: not tracked
	metrics *extender.Metrics
	// capacityMoves: the extender reads the capacity sources itself, so a
	// capacity grows with no Node event (HandlerOptions.CapacityMoves).
	capacityMoves bool
}

// DecodeBindingArgs decodes and validates the body of /bind.
func DecodeBindingArgs(data []byte) (*extenderv1.ExtenderBindingArgs, error) {
	var args extenderv1.ExtenderBindingArgs
	if err := json.Unmarshal(data, &args); err != nil {
		return nil, fmt.Errorf("decoding ExtenderBindingArgs: %w", err)
	}
	switch {
	case args.PodName == "":
		return nil, errors.New("ExtenderBindingArgs.PodName is missing")
	case args.PodNamespace == "":
		return nil, errors.New("ExtenderBindingArgs.PodNamespace is missing")
	case args.Node == "":
		return nil, errors.New("ExtenderBindingArgs.Node is missing")
	}
	return &args, nil
}

// DecodePreemptionArgs decodes and validates the body of /preempt.
func DecodePreemptionArgs(data []byte) (*extenderv1.ExtenderPreemptionArgs, error) {
	var args extenderv1.ExtenderPreemptionArgs
	if err := json.Unmarshal(data, &args); err != nil {
		return nil, fmt.Errorf("decoding ExtenderPreemptionArgs: %w", err)
	}
	if args.Pod == nil {
		return nil, errors.New("ExtenderPreemptionArgs.Pod is missing")
	}
	return &args, nil
}

// candidateNames lists the nodes of args in order: NodeNames when the
// scheduler sent them (nodeCacheCapable), else the names of Nodes.
func candidateNames(args *Args) []string {
	if args.NodeNames != nil {
		return *args.NodeNames
	}
	names := make([]string, len(args.Nodes.Items))
	for i := range args.Nodes.Items {
		names[i] = args.Nodes.Items[i].Name
	}
	return names
}

// usagesFor returns the usage of every candidate, in sc's buffer. With
// full Node objects, a node the node informer has not delivered yet takes
// its capacity from the object the scheduler sent.
func (v *verbs) usagesFor(args *Args, names []string, sc *Scratch) []extender.NodeUsage {
	usages := v.ledger.Usages(args.Pod.UID, names, sc.usages[:0])
	sc.usages = usages
	if args.NodeNames == nil {
		for i := range usages {
			if !usages[i].Known {
				usages[i].Known = true
				c := v.ledger.Rule().Capacity(args.Nodes.Items[i].Annotations, args.Nodes.Items[i].Labels)
				usages[i].Capacity, usages[i].CapacityError = c.IPs, c.Invalid
			}
		}
	}
	return usages
}

// filter answers /filter with extender.Filter's decision, in the mode it
// was asked (NodeNames or Nodes). The rejected nodes are listed in
// res.failed rather than the maps, which cost more to build than the rest
// of a names-only call; WriteTo writes both. The result lives in sc's
// buffers until sc is released.
func (v *verbs) filter(args *Args, sc *Scratch) *FilterResult {
	need := underlay.PodNeed(args.Pod)
	res := &FilterResult{
		FailedNodes:                extenderv1.FailedNodesMap{},
		FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{},
		scratch:                    sc,
	}
	if need == 0 {
		// Not an underlay pod: no opinion.
		if args.NodeNames != nil {
			res.NodeNames, res.plainNames = args.NodeNames, args.plainNames
		} else {
			res.Nodes = args.Nodes
		}
		return res
	}
	v.ledger.RememberNeed(args.Pod.UID, need)
	names := candidateNames(args)
	d := extender.Filter(need, v.usagesFor(args, names, sc), sc.filtered)
	sc.filtered = d
	v.count(args.Pod, need, names, d)

	res.failed = sc.failed[:0]
	if len(d.Kept) == 0 {
		// The reasons only matter to a pod no node has room for (its
		// event, and preemption); skipping them keeps the answer small.
		for _, r := range d.Rejected {
			res.failed = append(res.failed, failedNode{name: names[r.Index], reason: r.Verdict.Reason, unresolvable: r.Verdict.Unresolvable})
		}
	}
	sc.failed = res.failed
	if args.NodeNames != nil {
		// Never a nil slice, which would answer "NodeNames":null when every
		// node is full: the reply must stay in names mode (kube-scheduler
		// and our tests read it so).
		kept := sc.names[:0]
		if kept == nil {
			kept = []string{}
		}
		for _, i := range d.Kept {
			kept = append(kept, names[i])
		}
		sc.names = kept
		res.NodeNames, res.plainNames = &sc.names, args.plainNames
		return res
	}
	kept := make([]NodeItem, 0, len(d.Kept))
	for _, i := range d.Kept {
		kept = append(kept, args.Nodes.Items[i])
	}
	res.Nodes = &NodeItems{Items: kept}
	return res
}

// count records what filter decided: the rejected nodes by cause, and
// whether the pod now waits for IPs to be freed on one of names (the
// requeuer's list).
func (v *verbs) count(pod *v1.Pod, need int64, names []string, d extender.Filtered) {
	for _, c := range d.Causes {
		v.metrics.FilteredNodes.WithLabelValues(c.Cause).Add(float64(c.N))
	}
	switch {
	case v.waiting == nil:
	case len(d.Kept) > 0:
		v.waiting.Fits(pod.UID)
	case d.Waits() || v.capacityMoves && d.WaitsForCapacity():
		var prio int32
		if pod.Spec.Priority != nil {
			prio = *pod.Spec.Priority
		}
		v.waiting.Rejected(pod.UID, pod.Namespace, pod.Name, prio, need, names...)
	}
}

// bind asks b to bind the pod of args, counts the outcome, and tells
// Waiting of the room a refused Binding gave back.
func (v *verbs) bind(ctx context.Context, b *extender.Binder, args *extenderv1.ExtenderBindingArgs) error {
	out := b.Bind(ctx, extender.BindRequest{Namespace: args.PodNamespace, Name: args.PodName, UID: args.PodUID, Node: args.Node})
	v.metrics.Binds.WithLabelValues(out.Result).Inc()
	if out.Conflict != "" {
		v.metrics.BindConflicts.WithLabelValues(out.Conflict).Inc()
	}
	v.waiting.Freed(out.Freed)
	return out.Err
}

// prioritize scores every candidate on 0..MaxExtenderPriority by free IPs,
// in the order the scheduler sent them, as two parallel slices: the
// candidates and their scores (in sc's buffer), which the handler writes
// without building a HostPriorityList.
func (v *verbs) prioritize(args *Args, sc *Scratch) ([]string, []int64) {
	names := candidateNames(args)
	out := sc.scores[:0]
	defer func() { sc.scores = out }()
	need := underlay.PodNeed(args.Pod)
	if need == 0 {
		for range names {
			out = append(out, 0)
		}
		return names, out
	}
	out = extender.Scores(need, v.usagesFor(args, names, sc), out)
	return names, out
}

// preempt keeps the candidate nodes where evicting the proposed victims
// frees enough underlay IPs for the preemptor, with the victims unchanged.
// Victims count with what the ledger holds for them on that node.
func (v *verbs) preempt(args *extenderv1.ExtenderPreemptionArgs) *extenderv1.ExtenderPreemptionResult {
	need := underlay.PodNeed(args.Pod)
	res := &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	for node, vs := range victimsOf(args) {
		if need > 0 {
			u := v.ledger.Usages(args.Pod.UID, []string{node}, make([]extender.NodeUsage, 0, 1))[0]
			if !extender.Rescues(u, v.ledger.VictimsFree(node, vs.uids), need) {
				continue
			}
		}
		// Rebuilt so that a null victim never reaches the scheduler.
		mv := &extenderv1.MetaVictims{Pods: make([]*extenderv1.MetaPod, len(vs.uids)), NumPDBViolations: vs.pdb}
		for i, uid := range vs.uids {
			mv.Pods[i] = &extenderv1.MetaPod{UID: string(uid)}
		}
		res.NodeNameToMetaVictims[node] = mv
	}
	return res
}

// victimSet is one node's proposed victims, whichever form they came in.
type victimSet struct {
	uids []types.UID
	pdb  int64
}

// victimsOf reads the victims of each node from MetaVictims (nodeCacheCapable)
// or else from full Victims, skipping null entries.
func victimsOf(args *extenderv1.ExtenderPreemptionArgs) map[string]victimSet {
	out := map[string]victimSet{}
	if args.NodeNameToMetaVictims != nil {
		for node, mv := range args.NodeNameToMetaVictims {
			if mv == nil {
				out[node] = victimSet{}
				continue
			}
			out[node] = victimSet{pdb: mv.NumPDBViolations, uids: uidsOf(mv.Pods, func(p *extenderv1.MetaPod) types.UID { return types.UID(p.UID) })}
		}
		return out
	}
	for node, vs := range args.NodeNameToVictims {
		if vs == nil {
			out[node] = victimSet{}
			continue
		}
		out[node] = victimSet{pdb: vs.NumPDBViolations, uids: uidsOf(vs.Pods, func(p *v1.Pod) types.UID { return p.UID })}
	}
	return out
}

// uidsOf is the UIDs of the non-null pods.
func uidsOf[P any](pods []*P, uid func(*P) types.UID) []types.UID {
	var out []types.UID
	for _, p := range pods {
		if p != nil {
			out = append(out, uid(p))
		}
	}
	return out
}
