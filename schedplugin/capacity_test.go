package schedplugin

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// nodeOnly is a NodeInfo that knows only its Node: all sync reads.
type nodeOnly struct {
	fwk.NodeInfo
	node *v1.Node
}

func (n nodeOnly) Node() *v1.Node { return n.node }

func ipNode(name, capacity string) *v1.Node {
	return capNode(name, annotated(capacity), nil)
}

func infos(nodes ...*v1.Node) []fwk.NodeInfo {
	out := make([]fwk.NodeInfo, len(nodes))
	for i, n := range nodes {
		out[i] = nodeOnly{node: n}
	}
	return out
}

// TestCapacitiesKeepTheReadingOfOneObject: a reading is kept for the Node
// object it was read from, and a new object (an update) is read at once.
func TestCapacitiesKeepTheReadingOfOneObject(t *testing.T) {
	cs := newCapacities()
	n := ipNode("n", "3")
	if c := cs.of(n, ruleRead(underlay.Rule{Default: 10})); c.IPs != 3 {
		t.Fatalf("first read: %d, want 3", c.IPs)
	}
	cs.sync(infos(n))
	if got := held(cs); got != 1 {
		t.Fatalf("after sync the map holds %d readings, want 1", got)
	}
	// Evidence that the reading is kept: the object changed in place (which
	// an informer never does) is not read again.
	n.Annotations[names.UnderlayIPCapacityAnnotation] = "2"
	if c := cs.of(n, ruleRead(underlay.Rule{Default: 10})); c.IPs != 3 {
		t.Fatalf("kept reading: %d, want 3", c.IPs)
	}
	updated := n.DeepCopy()
	updated.Annotations[names.UnderlayIPCapacityAnnotation] = "7"
	if c := cs.of(updated, ruleRead(underlay.Rule{Default: 10})); c.IPs != 7 {
		t.Fatalf("an update is read at once: %d, want 7", c.IPs)
	}
	bad := n.DeepCopy()
	bad.Annotations[names.UnderlayIPCapacityAnnotation] = "lots"
	if c := cs.of(bad, ruleRead(underlay.Rule{Default: 10})); c.IPs != 0 || c.Invalid == "" {
		t.Fatalf("invalid annotation: %+v, want 0 and a reason", c)
	}
	cs.sync(infos(bad))
	if c := cs.of(bad, ruleRead(underlay.Rule{Default: 10})); c.IPs != 0 || c.Invalid == "" {
		t.Fatalf("kept invalid reading: %+v, want 0 and a reason", c)
	}
}

// held is how many readings cs has published.
func held(cs *capacities) int {
	r := cs.plain.known.Load()
	return len(r.base) + len(r.recent)
}

// TestCapacitiesForgetOldNodes: a cluster whose Nodes are updated again and
// again holds at most twice its nodes' readings and the recent ones, never
// every object it saw.
func TestCapacitiesForgetOldNodes(t *testing.T) {
	cs := newCapacities()
	nodes := make([]*v1.Node, 10)
	for i := range nodes {
		nodes[i] = ipNode(fmt.Sprintf("n%d", i), "5")
	}
	for round := 0; round < 20; round++ {
		for i := range nodes {
			nodes[i] = nodes[i].DeepCopy() // each node updated
			if c := cs.of(nodes[i], ruleRead(underlay.Rule{Default: 10})); c.IPs != 5 {
				t.Fatalf("round %d node %d: %d, want 5", round, i, c.IPs)
			}
		}
		cs.sync(infos(nodes...))
		if got := held(cs); got > 2*len(nodes)+64 {
			t.Fatalf("round %d: the map holds %d readings for %d nodes", round, got, len(nodes))
		}
	}
	// The cluster shrinks to one node and nothing new is read: the next
	// sync still drops the others.
	cs.sync(infos(nodes[0]))
	if got := held(cs); got != 1 {
		t.Fatalf("after the cluster shrank to 1 node the map holds %d readings", got)
	}
	if c := cs.of(nodes[0], ruleRead(underlay.Rule{Default: 10})); c.IPs != 5 {
		t.Fatalf("the remaining node: %d, want 5", c.IPs)
	}
}

// TestCapacitiesUpdateCopiesLittle: in a 5000-node cluster whose Nodes keep
// being updated (one per PreFilter here; kubelets' status reports come at
// about half that rate), a sync copies the recent readings, not every
// reading: copying the 5000 of them took 0.28 ms and 0.7 MB a sync.
func TestCapacitiesUpdateCopiesLittle(t *testing.T) {
	const n, updates = 5000, 2000
	objs := make([]*v1.Node, n)
	for i := range objs {
		objs[i] = ipNode(fmt.Sprintf("n%d", i), "5")
	}
	cs := newCapacities()
	nodes := infos(objs...)
	for _, o := range objs {
		cs.of(o, ruleRead(underlay.Rule{Default: 10}))
	}
	cs.sync(nodes)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < updates; i++ {
		k := i % n
		objs[k] = objs[k].DeepCopy()
		nodes[k] = nodeOnly{node: objs[k]}
		if c := cs.of(objs[k], ruleRead(underlay.Rule{Default: 10})); c.IPs != 5 {
			t.Fatalf("update %d: %d, want 5", i, c.IPs)
		}
		cs.sync(nodes)
	}
	runtime.ReadMemStats(&after)
	// Each update's DeepCopy is about 1.5 KB of this; a copy of every
	// reading would be 300 KB or more.
	if per := (after.TotalAlloc - before.TotalAlloc) / updates; per > 48<<10 {
		t.Fatalf("%d bytes allocated per update and sync, want under 48 KiB", per)
	}
	for _, o := range objs {
		if c := cs.of(o, ruleRead(underlay.Rule{Default: 10})); c.IPs != 5 {
			t.Fatalf("after the updates: %d, want 5", c.IPs)
		}
	}
	if got := held(cs); got > n+max(64, n/16) {
		t.Fatalf("%d readings held for %d nodes", got, n)
	}
}

// TestCapacitiesConcurrent: Filter and Score read from many goroutines
// while PreFilter syncs (run with -race).
func TestCapacitiesConcurrent(t *testing.T) {
	cs := newCapacities()
	nodes := make([]*v1.Node, 50)
	for i := range nodes {
		nodes[i] = ipNode(fmt.Sprintf("n%d", i), fmt.Sprint(i%7))
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 200; r++ {
				for i, n := range nodes {
					if c := cs.of(n, ruleRead(underlay.Rule{Default: 10})); c.IPs != int64(i%7) {
						t.Errorf("node %d: %d, want %d", i, c.IPs, i%7)
						return
					}
				}
			}
		}()
	}
	for r := 0; r < 200; r++ {
		cs.sync(infos(nodes...))
	}
	wg.Wait()
}

// BenchmarkCapacitiesChurn is a PreFilter's sync in a cluster whose Nodes
// keep being updated (kubelets' status reports: at 5000 nodes one every
// second or third pod): per op one Node is replaced by a new object, read by
// Filter, and synced.
func BenchmarkCapacitiesChurn(b *testing.B) {
	const n, versions = 5000, 4
	objs := make([][]*v1.Node, versions)
	for v := range objs {
		objs[v] = make([]*v1.Node, n)
		for i := range objs[v] {
			objs[v][i] = ipNode(fmt.Sprintf("n%d", i), "5")
		}
	}
	cs := newCapacities()
	read := ruleRead(underlay.Rule{Default: 10})
	nodes := infos(objs[0]...)
	for _, ni := range nodes {
		cs.of(ni.Node(), read)
	}
	cs.sync(nodes)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % n
		i++
		node := objs[(i/n+1)%versions][k]
		nodes[k] = nodeOnly{node: node}
		cs.of(node, read)
		cs.sync(nodes)
	}
}

// ruleRead reads a Node's capacity under rule alone, as a plugin that does
// not read the capacity sources itself.
func ruleRead(rule underlay.Rule) func(*v1.Node) reading {
	return func(n *v1.Node) reading { return reading{c: rule.Capacity(n.Annotations, n.Labels)} }
}

// BenchmarkCapacityHit is Filter's read of a node's capacity when the memo
// holds it, over 5000 published nodes in turn: what every Filter and Score
// of an underlay pod pays per node.
func BenchmarkCapacityHit(b *testing.B) {
	const n = 5000
	nodes := make([]*v1.Node, n)
	for i := range nodes {
		nodes[i] = ipNode(fmt.Sprintf("n%d", i), "5")
	}
	pl := &Plugin{rule: underlay.Rule{Default: 10}, caps: newCapacities()}
	for _, node := range nodes {
		pl.capacity(node)
	}
	pl.caps.sync(infos(nodes...))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if pl.capacity(nodes[i%n]).IPs != 5 {
			b.Fatal("wrong capacity")
		}
		i++
	}
}
