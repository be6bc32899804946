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
// Filter and Score only read the published readings. A Node they do not
// hold (a node added or updated since) is read directly and noted; the next
// PreFilter publishes it (see sync).
type capacities struct {
	// plain is the memo of a plugin that reads no sources, stamped of one
	// that does (sourced.go); one of them is nil. Two memos, chosen once,
	// so that a plugin without sources pays nothing for the stamp on the
	// hit that Filter and Score take per node (BenchmarkCapacityHit).
	plain   *memo[underlay.Capacity]
	stamped *memo[reading]
}

// memo is one kind of reading, by Node object.
type memo[V any] struct {
	known atomic.Pointer[readings[V]]

	mu sync.Mutex
	// fresh are the readings made since the last sync; guarded by mu.
	fresh map[*v1.Node]V
}

// reading is a node's capacity as read from one Node object and one gen of
// the plugin's answer for the node from the capacity sources (sourced.go):
// that answer changes with no new Node, so a reading of an older gen is
// read again.
type reading struct {
	c   underlay.Capacity
	v   *viewed
	gen uint64
}

// current: nothing the reading was made from has changed since.
func (r *reading) current() bool { return r.v == nil || r.v.gen.Load() == r.gen }

// readings is one published, never modified, set of readings: base holds
// the snapshot's Nodes as of the last fold, recent the readings made since.
// Kubelets report each Node's status every 5 minutes, 17 updates a second
// at 5000 nodes, where kube-scheduler places 30-40 pods a second: copying
// every reading on each update cost 0.28 ms and 0.7 MB a sync
// (BenchmarkCapacitiesChurn; 14 µs and 16 KB now), so an update copies only
// recent, and base is rebuilt once recent holds a sixteenth of the nodes.
type readings[V any] struct {
	base, recent map[*v1.Node]V
}

func (r *readings[V]) get(node *v1.Node) (V, bool) {
	if c, ok := r.base[node]; ok {
		return c, true
	}
	c, ok := r.recent[node]
	return c, ok
}

func newMemo[V any]() *memo[V] {
	m := &memo[V]{fresh: map[*v1.Node]V{}}
	m.known.Store(&readings[V]{})
	return m
}

// newCapacities is the memo of a plugin that reads no sources;
// newStampedCapacities of one that does.
func newCapacities() *capacities        { return &capacities{plain: newMemo[underlay.Capacity]()} }
func newStampedCapacities() *capacities { return &capacities{stamped: newMemo[reading]()} }

// note keeps a reading made since the last sync.
func (m *memo[V]) note(node *v1.Node, v V) {
	m.mu.Lock()
	m.fresh[node] = v
	m.mu.Unlock()
}

// of is the capacity of node as read reads it; a nil capacities reads it
// every time.
func (cs *capacities) of(node *v1.Node, read func(*v1.Node) reading) underlay.Capacity {
	switch {
	case cs == nil:
		return read(node).c
	case cs.plain != nil:
		if c, ok := cs.plain.known.Load().get(node); ok {
			return c
		}
		c := read(node).c
		cs.plain.note(node, c)
		return c
	}
	if r, ok := cs.stamped.known.Load().get(node); ok && r.current() {
		return r.c
	}
	r := read(node)
	cs.stamped.note(node, r)
	return r.c
}

// sync publishes the readings made since the last sync (memo.sync).
func (cs *capacities) sync(nodes []fwk.NodeInfo) {
	switch {
	case cs == nil:
	case cs.plain != nil:
		cs.plain.sync(nodes)
	default:
		cs.stamped.sync(nodes)
	}
}

// sync publishes the readings made since the last sync. It folds them into
// a new base, keeping only the Nodes of nodes, once recent holds a
// sixteenth of the nodes (at least 64) or base twice their number (a
// cluster that shrank). PreFilter calls it; Filter and Score of the same
// cycle run after it.
func (m *memo[V]) sync(nodes []fwk.NodeInfo) {
	cur := m.known.Load()
	m.mu.Lock()
	fresh := m.fresh
	if len(fresh) == 0 && len(cur.base) <= 2*len(nodes) {
		m.mu.Unlock()
		return
	}
	m.fresh = map[*v1.Node]V{}
	m.mu.Unlock()

	next := &readings[V]{base: cur.base, recent: make(map[*v1.Node]V, len(cur.recent)+len(fresh))}
	maps.Copy(next.recent, cur.recent)
	maps.Copy(next.recent, fresh)
	if len(next.recent) < max(64, len(nodes)/16) && len(cur.base) <= 2*len(nodes) {
		m.known.Store(next)
		return
	}
	base := make(map[*v1.Node]V, len(nodes))
	for _, ni := range nodes {
		if n := ni.Node(); n != nil {
			if c, ok := next.get(n); ok {
				base[n] = c
			}
		}
	}
	m.known.Store(&readings[V]{base: base})
}
