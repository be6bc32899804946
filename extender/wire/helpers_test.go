package wire

import (
	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/extender/extendertest"
)

var (
	pod           = extendertest.Pod
	node          = extendertest.Node
	realisticNode = extendertest.RealisticNode
	bindArgs      = extendertest.BindArgs
)

// newTestLedger returns a ledger with default capacity 10 and the given
// nodes and pods applied.
func newTestLedger(nodes []*v1.Node, pods []*v1.Pod) *extender.Ledger {
	l := extender.NewLedger(extender.LedgerOptions{DefaultCapacity: 10})
	for _, n := range nodes {
		l.SetNode(n)
	}
	for _, p := range pods {
		l.SetPod(p)
	}
	return l
}

// verbsOf answers the verbs from l, with unregistered metrics and no
// waiting-pod bookkeeping.
func verbsOf(l *extender.Ledger) *verbs {
	return &verbs{ledger: l, metrics: extender.NewMetrics(nil)}
}
