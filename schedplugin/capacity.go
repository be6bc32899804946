package schedplugin

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/internal/underlay"
)

// capacities remembers each node's capacity under the rule for the version
// of the Node it was read from. At 5000 nodes the map lookups NodeCapacity
// makes on a Node's annotations and labels, in Filter and in Score of every
// node for every pod, were 8.9% of kube-scheduler's CPU (BENCHMARKS.md
// "Plugin mode, 5000 nodes"); a hit is one lookup by name. The answer is
// always the rule's for the Node the scheduler hands in: an entry counts
// only for the same resourceVersion, and a Node without one (a test's) is
// never remembered.
type capacities struct {
	def int64
	m   sync.Map // node name -> *capacityEntry
}

type capacityEntry struct {
	resourceVersion string
	capacity        underlay.Capacity
}

func (cs *capacities) of(node *v1.Node) underlay.Capacity {
	rv := node.ResourceVersion
	if rv != "" {
		if e, ok := cs.m.Load(node.Name); ok && e.(*capacityEntry).resourceVersion == rv {
			return e.(*capacityEntry).capacity
		}
	}
	c := underlay.NodeCapacity(node.Annotations, node.Labels, cs.def)
	if rv != "" {
		cs.m.Store(node.Name, &capacityEntry{resourceVersion: rv, capacity: c})
	}
	return c
}

// forget drops a deleted node's entry, so that node churn leaves nothing.
func (cs *capacities) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		cs.m.Delete(d.Key)
		return
	}
	if n, ok := obj.(*v1.Node); ok {
		cs.m.Delete(n.Name)
	}
}

// len is the number of nodes remembered (tests).
func (cs *capacities) len() int {
	n := 0
	cs.m.Range(func(any, any) bool { n++; return true })
	return n
}
