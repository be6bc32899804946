package publisher

import (
	"context"
	"testing"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestPublisherWritesOnce: a node synced again before the informer has
// shown the publisher's own write (Run's list and the informer's add
// queue it at once; a pod event queues it too) is not written twice; a
// change the informer delivers (the kubelet zeroing the resource) is
// written again.
func TestPublisherWritesOnce(t *testing.T) {
	n := node(map[string]string{names.UnderlayIPCapacityAnnotation: "4"}, "", "")
	cs := fake.NewClientset(n)
	nodes := informers.NewSharedInformerFactory(cs, 0).Core().V1().Nodes()
	p, err := New(cs, nodes, Options{Rule: underlay.Rule{Default: 10}})
	if err != nil {
		t.Fatal(err)
	}
	// No informer runs: the lister keeps the node as it was before any
	// write, as a lagging watch would.
	if err := nodes.Informer().GetIndexer().Add(n); err != nil {
		t.Fatal(err)
	}
	patches := func() int {
		c := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "patch" {
				c++
			}
		}
		return c
	}
	rec := record.NewFakeRecorder(10)
	for range 3 {
		if err := p.sync(context.Background(), rec, n.Name); err != nil {
			t.Fatal(err)
		}
	}
	if got := patches(); got != 1 {
		t.Fatalf("%d patches from three syncs of a lagging lister, want 1", got)
	}
	p.enqueue(n) // the informer delivers a change of the node
	if err := p.sync(context.Background(), rec, n.Name); err != nil {
		t.Fatal(err)
	}
	if got := patches(); got != 2 {
		t.Fatalf("%d patches after the informer showed a change, want 2", got)
	}
}
