package extender

import (
	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/extender/extendertest"
)

var (
	pod           = extendertest.Pod
	node          = extendertest.Node
	realisticNode = extendertest.RealisticNode
)

// newTestLedger returns a ledger with default capacity 10 and the given
// nodes and pods applied.
func newTestLedger(nodes []*v1.Node, pods []*v1.Pod) *Ledger {
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	for _, n := range nodes {
		l.SetNode(n)
	}
	for _, p := range pods {
		l.SetPod(p)
	}
	return l
}

// bindingAPI is the fake API server's pods/binding (extendertest).
type bindingAPI = extendertest.BindingAPI

// bindArgs is kube-scheduler's bind call for p on node.
func bindArgs(p *v1.Pod, node string) BindRequest {
	return BindRequest{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Node: node}
}
