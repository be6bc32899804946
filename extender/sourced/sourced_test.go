package sourced

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/internal/names"
)

// gatedView is a View that syncs when the test opens its gate.
type gatedView struct {
	gate chan struct{}
	m    map[string]capacitysource.Mirror
}

func (g *gatedView) Start(<-chan struct{}) {}
func (g *gatedView) Shutdown()             {}
func (g *gatedView) Synced() []cache.InformerSynced {
	return []cache.InformerSynced{func() bool {
		select {
		case <-g.gate:
			return true
		default:
			return false
		}
	}}
}
func (g *gatedView) Mirror(node string, _ map[string]string) capacitysource.Mirror { return g.m[node] }

// TestReader: before the View syncs every node reads as not read (the
// mirror's annotations it carries dropped) and changes are not told; at
// sync every node is told once, and only then does HasSynced hold.
func TestReader(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	stale := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{
		names.UnderlayIPSourceCapacityAnnotation: "3", names.UnderlayIPCapacityAnnotation: "7"}}}
	if err := idx.Add(stale); err != nil {
		t.Fatal(err)
	}
	view := &gatedView{gate: make(chan struct{}), m: map[string]capacitysource.Mirror{"a": {Value: "5", Origin: "s x/a"}}}
	r := New(corelisters.NewNodeLister(idx), nil)
	r.SetView(view)
	var mu sync.Mutex
	var told []string
	hasSyncedWhenTold := false
	r.OnChange(func(n *v1.Node) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, n.Name)
		hasSyncedWhenTold = hasSyncedWhenTold || r.HasSynced()
	})

	got := r.Over(stale).Annotations
	if _, ok := got[names.UnderlayIPSourceCapacityAnnotation]; ok || got[names.UnderlayIPCapacityAnnotation] != "7" {
		t.Fatalf("before sync: %v, want the mirror's annotations dropped and the node's own kept", got)
	}
	r.Changed("a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx, func() bool { return true })
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	if len(told) != 0 || r.HasSynced() {
		t.Fatalf("told %v, synced %v before the View synced", told, r.HasSynced())
	}
	mu.Unlock()
	close(view.gate)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return r.HasSynced(), nil
	}); err != nil {
		t.Fatal("never synced")
	}
	mu.Lock()
	if len(told) != 1 || told[0] != "a" || hasSyncedWhenTold {
		t.Fatalf("told %v (synced while telling: %v), want [a] told before HasSynced", told, hasSyncedWhenTold)
	}
	mu.Unlock()
	if v := r.Over(stale).Annotations[names.UnderlayIPSourceCapacityAnnotation]; v != "5" {
		t.Fatalf("after sync the source capacity reads %q, want the View's 5", v)
	}
	if stale.Annotations[names.UnderlayIPSourceCapacityAnnotation] != "3" {
		t.Fatal("Over modified the informer's node")
	}
	r.Changed("a")
	r.Changed("gone")
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 2 {
		t.Fatalf("told %v after a change of a and of a node that is not one, want a twice", told)
	}
}
