package schedplugin

import (
	"maps"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/underlay"
)

// capacities remembers the capacity read from each Node object.
//
// Why: at 5000 nodes, reading the two small maps of every Node twice per
// pod (Filter and Score) took 8.9% of kube-scheduler's CPU, the Nodes no
// longer fitting the CPU's caches (BENCHMARKS.md "Plugin mode, 5000
// nodes"). A memo keyed by node name cost more than it saved (hashing the
// name misses as often as the maps do). This one is keyed by the *v1.Node
// pointer: the informer delivers every update of a Node as a new object and
// never changes one in place, so a reading is used only for the exact object
// it was read from, and a decision is the one reading the Node would give.
// A pointer key hashes in a few instructions and the reading sits beside it
// in the map, so a lookup touches one place in memory.
//
// Filter and Score only read the map. A Node it does not hold (a node
// added or updated since) is read directly and noted; the next PreFilter
// publishes a copy with the new readings, and drops the Nodes the snapshot
// no longer has once the map holds twice as many as it has.
type capacities struct {
	known atomic.Pointer[map[*v1.Node]underlay.Capacity]

	mu sync.Mutex
	// fresh are the readings made since the last sync; guarded by mu.
	fresh map[*v1.Node]underlay.Capacity
}

func newCapacities() *capacities {
	c := &capacities{fresh: map[*v1.Node]underlay.Capacity{}}
	c.known.Store(&map[*v1.Node]underlay.Capacity{})
	return c
}

// of is the capacity of node under the one rule, def where the node sets
// none; a nil capacities reads the Node every time.
func (cs *capacities) of(node *v1.Node, def int64) underlay.Capacity {
	if cs == nil {
		return underlay.NodeCapacity(node.Annotations, node.Labels, def)
	}
	if c, ok := (*cs.known.Load())[node]; ok {
		return c
	}
	c := underlay.NodeCapacity(node.Annotations, node.Labels, def)
	cs.mu.Lock()
	cs.fresh[node] = c
	cs.mu.Unlock()
	return c
}

// sync publishes the readings made since the last sync, and prunes the map
// to the Nodes of nodes when it has grown to twice their number. PreFilter
// calls it; Filter and Score of the same cycle run after it.
func (cs *capacities) sync(nodes []fwk.NodeInfo) {
	if cs == nil {
		return
	}
	known := *cs.known.Load()
	cs.mu.Lock()
	fresh := cs.fresh
	if len(fresh) == 0 && len(known) <= 2*len(nodes) {
		cs.mu.Unlock()
		return
	}
	cs.fresh = map[*v1.Node]underlay.Capacity{}
	cs.mu.Unlock()

	var next map[*v1.Node]underlay.Capacity
	if len(known)+len(fresh) <= 2*len(nodes) {
		next = maps.Clone(known)
		maps.Copy(next, fresh)
	} else {
		next = make(map[*v1.Node]underlay.Capacity, len(nodes))
		for _, ni := range nodes {
			n := ni.Node()
			if c, ok := known[n]; ok {
				next[n] = c
			} else if c, ok := fresh[n]; ok {
				next[n] = c
			}
		}
	}
	cs.known.Store(&next)
}
