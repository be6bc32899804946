package schedplugin

import (
	"fmt"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/names"
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
	if c := cs.of(n, 10); c.IPs != 3 {
		t.Fatalf("first read: %d, want 3", c.IPs)
	}
	cs.sync(infos(n))
	if got := len(*cs.known.Load()); got != 1 {
		t.Fatalf("after sync the map holds %d readings, want 1", got)
	}
	// Evidence that the reading is kept: the object changed in place (which
	// an informer never does) is not read again.
	n.Annotations[names.UnderlayIPCapacityAnnotation] = "2"
	if c := cs.of(n, 10); c.IPs != 3 {
		t.Fatalf("kept reading: %d, want 3", c.IPs)
	}
	updated := n.DeepCopy()
	updated.Annotations[names.UnderlayIPCapacityAnnotation] = "7"
	if c := cs.of(updated, 10); c.IPs != 7 {
		t.Fatalf("an update is read at once: %d, want 7", c.IPs)
	}
	bad := n.DeepCopy()
	bad.Annotations[names.UnderlayIPCapacityAnnotation] = "lots"
	if c := cs.of(bad, 10); c.IPs != 0 || c.Invalid == "" {
		t.Fatalf("invalid annotation: %+v, want 0 and a reason", c)
	}
	cs.sync(infos(bad))
	if c := cs.of(bad, 10); c.IPs != 0 || c.Invalid == "" {
		t.Fatalf("kept invalid reading: %+v, want 0 and a reason", c)
	}
}

// TestCapacitiesForgetOldNodes: a cluster whose Nodes are updated again and
// again holds at most twice its nodes' readings, never every object it saw.
func TestCapacitiesForgetOldNodes(t *testing.T) {
	cs := newCapacities()
	nodes := make([]*v1.Node, 10)
	for i := range nodes {
		nodes[i] = ipNode(fmt.Sprintf("n%d", i), "5")
	}
	for round := 0; round < 20; round++ {
		for i := range nodes {
			nodes[i] = nodes[i].DeepCopy() // each node updated
			if c := cs.of(nodes[i], 10); c.IPs != 5 {
				t.Fatalf("round %d node %d: %d, want 5", round, i, c.IPs)
			}
		}
		cs.sync(infos(nodes...))
		if got := len(*cs.known.Load()); got > 2*len(nodes) {
			t.Fatalf("round %d: the map holds %d readings for %d nodes", round, got, len(nodes))
		}
	}
	// The cluster shrinks to one node and nothing new is read: the next
	// sync still drops the others.
	cs.sync(infos(nodes[0]))
	if got := len(*cs.known.Load()); got != 1 {
		t.Fatalf("after the cluster shrank to 1 node the map holds %d readings", got)
	}
	if c := cs.of(nodes[0], 10); c.IPs != 5 {
		t.Fatalf("the remaining node: %d, want 5", c.IPs)
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
					if c := cs.of(n, 10); c.IPs != int64(i%7) {
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
