package schedplugin

import (
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/underlay"
)

// capacities remembers each node's capacity, read from its annotation and
// label, for as long as the scheduler hands the plugin the same Node object.
//
// Why: at 5000 nodes, reading the two small maps of every Node twice per
// pod (Filter and Score) took 8.9% of kube-scheduler's CPU, the Nodes no
// longer fitting the CPU's caches (BENCHMARKS.md "Plugin mode, 5000
// nodes"). A memo keyed by node name cost more than it saved (hashing the
// name misses as often as the maps do). This one is keyed by the NodeInfo
// pointer, which the scheduler's snapshot keeps for the life of a node, and
// checked against the Node pointer, which changes with every update of the
// Node: a reading is used only for the exact object it was read from, so a
// decision is the one reading the Node would give.
//
// Filter and Score only read the index. A NodeInfo it does not hold (a node
// added, or a clone made for preemption or nominated pods) is read
// directly and noted; the next PreFilter rebuilds the index from the
// snapshot's nodes, which also drops removed nodes and clones.
type capacities struct {
	index  atomic.Pointer[map[fwk.NodeInfo]*capacitySlot]
	missed atomic.Bool
}

// capacitySlot holds the latest reading for one NodeInfo.
type capacitySlot struct {
	p atomic.Pointer[capacityReading]
}

type capacityReading struct {
	node *v1.Node
	c    underlay.Capacity
}

func newCapacities() *capacities {
	c := &capacities{}
	c.index.Store(&map[fwk.NodeInfo]*capacitySlot{})
	return c
}

// of is the capacity of ni's node under the one rule, def where the node
// sets none; a nil capacities reads the Node every time.
func (cs *capacities) of(ni fwk.NodeInfo, node *v1.Node, def int64) underlay.Capacity {
	if cs == nil {
		return underlay.NodeCapacity(node.Annotations, node.Labels, def)
	}
	slot := (*cs.index.Load())[ni]
	if slot == nil {
		if !cs.missed.Load() {
			cs.missed.Store(true)
		}
		return underlay.NodeCapacity(node.Annotations, node.Labels, def)
	}
	if r := slot.p.Load(); r != nil && r.node == node {
		return r.c
	}
	c := underlay.NodeCapacity(node.Annotations, node.Labels, def)
	slot.p.Store(&capacityReading{node: node, c: c})
	return c
}

// sync makes the index hold exactly nodes, keeping their readings, when a
// reader has missed since the last sync. PreFilter calls it; Filter and
// Score of the same cycle run after it.
func (cs *capacities) sync(nodes []fwk.NodeInfo) {
	if cs == nil || !cs.missed.Load() {
		return
	}
	cs.missed.Store(false)
	old := *cs.index.Load()
	next := make(map[fwk.NodeInfo]*capacitySlot, len(nodes))
	for _, ni := range nodes {
		s := old[ni]
		if s == nil {
			s = &capacitySlot{}
		}
		next[ni] = s
	}
	cs.index.Store(&next)
}
