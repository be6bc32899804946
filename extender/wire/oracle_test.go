package wire

import (
	"github.com/capscale/capscale/extender"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// The verbs in the shape of the upstream types, for tests to compare the
// handler's hand-written answers against.

// Filter keeps the candidate nodes with room for the pod and explains every
// other one. It answers in the mode it was asked: NodeNames or Nodes.
func oracleFilter(l *extender.Ledger, args *Args) *FilterResult {
	res := verbsOf(l).filter(args, new(Scratch))
	for _, f := range res.failed {
		if f.unresolvable {
			res.FailedAndUnresolvableNodes[f.name] = f.reason
		} else {
			res.FailedNodes[f.name] = f.reason
		}
	}
	res.failed = nil
	return res
}

// Prioritize scores every candidate on 0..MaxExtenderPriority by free IPs,
// in the order the scheduler sent them.
func oraclePrioritize(l *extender.Ledger, args *Args) extenderv1.HostPriorityList {
	names, scores := verbsOf(l).prioritize(args, new(Scratch))
	out := make(extenderv1.HostPriorityList, len(names))
	for i, name := range names {
		out[i] = extenderv1.HostPriority{Host: name, Score: scores[i]}
	}
	return out
}
