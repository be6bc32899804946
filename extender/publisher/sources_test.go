package publisher

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// fakeSources is a read of the capacity sources whose answers a test sets.
type fakeSources struct {
	mu sync.Mutex
	m  map[string]capacitysource.Mirror
}

func (f *fakeSources) Mirror(n *v1.Node) capacitysource.Mirror {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[n.Name]
}

func (f *fakeSources) HasSynced() bool { return true }

func (f *fakeSources) set(node string, m capacitysource.Mirror) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[node] = m
}

// statusPatches counts the patches of nodes/status sent for node.
func statusPatches(cs *fake.Clientset, node string) int {
	n := 0
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetSubresource() == "status" && p.GetName() == node {
			n++
		}
	}
	return n
}

// TestPublisherReadsSources: with the sources read by the publisher, a node
// the mirror never wrote gets the sources' capacity and the mirror's
// annotations in one status patch, and a change of the sources is one
// patch more. Without Options.Sources the node counts as not read and
// nothing is published.
func TestPublisherReadsSources(t *testing.T) {
	cs := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	src := &fakeSources{m: map[string]capacitysource.Mirror{
		"a": {Value: "6", Origin: "cilium ciliumnodes.cilium.io/a"},
	}}
	p, _ := newTestPublisher(t, cs, Options{Rule: underlay.Rule{Default: 10, AwaitSource: true}, Sources: src})
	stop := runTerm(p)
	defer stop()
	waitPublished(t, cs, "a", 6)
	n, err := cs.CoreV1().Nodes().Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations[names.UnderlayIPSourceCapacityAnnotation] != "6" || n.Annotations[names.UnderlayIPSourceAnnotation] != "cilium ciliumnodes.cilium.io/a" {
		t.Fatalf("the mirror's annotations were not written with the capacity: %v", n.Annotations)
	}
	if got := statusPatches(cs, "a"); got != 1 {
		t.Fatalf("%d status patches for the first publish, want 1", got)
	}
	if got := len(cs.Actions()); got == 0 {
		t.Fatal("no actions recorded")
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() == "" {
			t.Fatalf("a Node patch outside status: %v", a)
		}
	}

	src.set("a", capacitysource.Mirror{Value: "8", Origin: "cilium ciliumnodes.cilium.io/a"})
	p.SourceChanged(n)
	waitPublished(t, cs, "a", 8)
	n, err = cs.CoreV1().Nodes().Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations[names.UnderlayIPSourceCapacityAnnotation] != "8" {
		t.Fatalf("source-capacity annotation %q after the change, want 8", n.Annotations[names.UnderlayIPSourceCapacityAnnotation])
	}
	if got := statusPatches(cs, "a"); got != 2 {
		t.Fatalf("%d status patches after one change, want 2", got)
	}
}

// TestPublisherReadsSourcesForeign: a node whose resource another writer
// owns is left alone, but the mirror's annotations are still written.
func TestPublisherReadsSourcesForeign(t *testing.T) {
	foreign := node(nil, "5", "")
	cs := fake.NewClientset(foreign)
	src := &fakeSources{m: map[string]capacitysource.Mirror{
		foreign.Name: {Value: "6", Origin: "cilium ciliumnodes.cilium.io/x"},
	}}
	p, _ := newTestPublisher(t, cs, Options{Rule: underlay.Rule{Default: 10, AwaitSource: true}, Sources: src})
	stop := runTerm(p)
	defer stop()
	waitFor(t, func() bool {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), foreign.Name, metav1.GetOptions{})
		return err == nil && n.Annotations[names.UnderlayIPSourceCapacityAnnotation] == "6"
	})
	n, _ := cs.CoreV1().Nodes().Get(context.Background(), foreign.Name, metav1.GetOptions{})
	if q := n.Status.Capacity[underlay.Resource]; q.Value() != 5 {
		t.Fatalf("a foreign node's resource was rewritten: %s", q.String())
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatal("condition not met in 10 s")
	}
}
