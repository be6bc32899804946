package extender

import (
	"encoding/json"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/capscale/capscale/internal/underlay"
)

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
func (l *Ledger) usagesFor(args *Args, names []string, sc *Scratch) []NodeUsage {
	usages := l.Usages(args.Pod.UID, names, sc.usages[:0])
	sc.usages = usages
	if args.NodeNames == nil {
		for i := range usages {
			if !usages[i].Known {
				usages[i].Known = true
				c := underlay.NodeCapacity(args.Nodes.Items[i].Annotations, args.Nodes.Items[i].Labels, l.defaultCapacity)
				usages[i].Capacity, usages[i].CapacityError = c.IPs, c.Invalid
			}
		}
	}
	return usages
}

// filter keeps the candidate nodes with the most free IPs (MostFree) and,
// when none has room, explains every one, answering in the mode it was
// asked (NodeNames or Nodes). The rejected nodes are listed in res.failed
// rather than the maps, which cost more to build than the rest of a
// names-only call; WriteTo writes both. The result lives in sc's buffers
// until sc is released.
func (l *Ledger) filter(args *Args, sc *Scratch) *FilterResult {
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
	l.RememberNeed(args.Pod.UID, need)
	names := candidateNames(args)
	usages := l.usagesFor(args, names, sc)

	var (
		causes    []causeCount
		keptNames []string
		keptNodes []NodeItem
	)
	res.failed = sc.failed[:0]
	if args.NodeNames != nil {
		keptNames = sc.names[:0]
		if keptNames == nil {
			// A new buffer is a nil slice, which would answer
			// "NodeNames":null when every node is full: the reply must
			// stay in names mode (kube-scheduler and our tests read it so).
			keptNames = []string{}
		}
	} else {
		keptNodes = make([]NodeItem, 0, len(names))
	}
	vs := verdicts{need: need}
	best := MostFree(need, usages)
	for i, name := range names {
		v := vs.of(usages[i])
		if v.Fit {
			if usages[i].Free() < best {
				// Outranked: kept out so that kube-scheduler picks among
				// the most free only (see MostFree).
				continue
			}
			if args.NodeNames != nil {
				keptNames = append(keptNames, name)
			} else {
				keptNodes = append(keptNodes, args.Nodes.Items[i])
			}
			continue
		}
		causes = countCause(causes, v.Cause)
		res.failed = append(res.failed, failedNode{name: name, reason: v.Reason, unresolvable: v.Unresolvable})
	}
	for _, c := range causes {
		l.metrics.FilteredNodes.WithLabelValues(c.cause).Add(float64(c.n))
	}
	kept := len(keptNames) + len(keptNodes)
	l.noteWaiting(args, need, kept, causes)
	if kept > 0 {
		// The reasons only matter to a pod no node has room for (its
		// event, and preemption); skipping them keeps the answer small.
		res.failed = res.failed[:0]
	}
	sc.failed = res.failed
	if args.NodeNames != nil {
		sc.names = keptNames
		res.NodeNames, res.plainNames = &sc.names, args.plainNames
	} else {
		res.Nodes = &NodeItems{Items: keptNodes}
	}
	return res
}

// noteWaiting tells Waiting whether the pod now waits for IPs to be freed:
// no node had room, and on at least one the IPs were used up (not a
// capacity too small, which no release fixes).
func (l *Ledger) noteWaiting(args *Args, need int64, kept int, causes []causeCount) {
	if l.waiting == nil {
		return
	}
	if kept > 0 {
		l.waiting.Fits(args.Pod.UID)
		return
	}
	for _, c := range causes {
		if c.cause == CauseExhausted {
			var prio int32
			if args.Pod.Spec.Priority != nil {
				prio = *args.Pod.Spec.Priority
			}
			l.waiting.Rejected(args.Pod.UID, args.Pod.Namespace, args.Pod.Name, prio, need)
			return
		}
	}
}

// causeCount counts the rejected nodes of one cause.
type causeCount struct {
	cause string
	n     int
}

// countCause adds one to cause in counts: a handful of causes, so a list
// beats a map.
func countCause(counts []causeCount, cause string) []causeCount {
	for i := range counts {
		if counts[i].cause == cause {
			counts[i].n++
			return counts
		}
	}
	return append(counts, causeCount{cause: cause, n: 1})
}

// prioritize scores every candidate on 0..MaxExtenderPriority by free IPs,
// in the order the scheduler sent them, as two parallel slices: the
// candidates and their scores (in sc's buffer), which the handler writes
// without building a HostPriorityList.
func (l *Ledger) prioritize(args *Args, sc *Scratch) ([]string, []int64) {
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
	out = Scores(need, l.usagesFor(args, names, sc), out)
	return names, out
}

// Preempt keeps the candidate nodes where evicting the proposed victims frees
// enough underlay IPs for the preemptor, with the victims unchanged. Victims
// count with what the ledger holds for them on that node.
func (l *Ledger) Preempt(args *extenderv1.ExtenderPreemptionArgs) *extenderv1.ExtenderPreemptionResult {
	need := underlay.PodNeed(args.Pod)
	res := &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	for node, v := range victimsOf(args) {
		if need > 0 {
			u := l.Usages(args.Pod.UID, []string{node}, make([]NodeUsage, 0, 1))[0]
			u.Used = max(0, u.Used-l.VictimsFree(node, v.uids))
			if !Fits(u, need).Fit {
				continue
			}
		}
		// Rebuilt so that a null victim never reaches the scheduler.
		mv := &extenderv1.MetaVictims{Pods: make([]*extenderv1.MetaPod, len(v.uids)), NumPDBViolations: v.pdb}
		for i, uid := range v.uids {
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
	for node, v := range args.NodeNameToVictims {
		if v == nil {
			out[node] = victimSet{}
			continue
		}
		out[node] = victimSet{pdb: v.NumPDBViolations, uids: uidsOf(v.Pods, func(p *v1.Pod) types.UID { return p.UID })}
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
