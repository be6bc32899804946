package capacitysource

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
)

// TestView holds the View to what its users rely on without a Node of
// its own: each node's Mirror by the rule, and the names of the nodes
// whose Mirror may have changed, but none for a change that moves neither
// the node nor the count.
func TestView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := presetSource(t, "cilium-eni")
	src.Name = "cilium"
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{src.Resource.GVR(): "CiliumNodeList"},
		ipamtest.CiliumNodeENI("n1", "uid-n1", 12, nil))

	var mu sync.Mutex
	var told []string
	v, err := NewView(dyn, []*Compiled{src}, nil, func(node string) {
		mu.Lock()
		told = append(told, node)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	v.Start(ctx.Done())
	defer func() { cancel(); v.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), v.Synced()...) {
		t.Fatal("not synced")
	}
	takeTold := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := told
		told = nil
		return out
	}
	if got := takeTold(); len(got) != 1 || got[0] != "n1" {
		t.Errorf("told %v on the first list, want [n1]", got)
	}
	if m := v.Mirror("n1", nil); m.Value != "10" || m.Origin != "cilium ciliumnodes.cilium.io/n1" || m.Draws != "all" {
		t.Errorf("n1's mirror %+v, want 10 from cilium ciliumnodes.cilium.io/n1, drawing all", m)
	}
	// The preset's source selects no nodes by label: a node without an
	// object is covered and invalid, never the default.
	if m := v.Mirror("n2", nil); !m.Invalid() {
		t.Errorf("n2 without an object: %+v, want invalid", m)
	}

	gvr := src.Resource.GVR()
	waitTold := func(what string, want string) {
		t.Helper()
		var got []string
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got = append(got, takeTold()...)
			return len(got) > 0, nil
		}); err != nil {
			t.Fatalf("%s: told nothing", what)
		}
		for _, n := range got {
			if n != want {
				t.Errorf("%s: told %v, want only %s", what, got, want)
				return
			}
		}
	}
	// A status change that leaves the count alone tells nothing: by the
	// time the next object's arrival is told, the informer has handled it.
	if _, err := dyn.Resource(gvr).Update(ctx, ipamtest.CiliumNodeENI("n1", "uid-n1", 12, []string{"shop/a"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(gvr).Create(ctx, ipamtest.CiliumNodeENI("n2", "uid-n2", 5, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTold("n2's object came", "n2")
	if m := v.Mirror("n2", nil); m.Value != "3" {
		t.Errorf("n2 with its object: %q, want 3", m.Value)
	}
	// The change of the count tells n1 (once or twice: the old and the
	// new object both map to it).
	if _, err := dyn.Resource(gvr).Update(ctx, ipamtest.CiliumNodeENI("n1", "uid-n1", 20, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTold("the pool grew", "n1")
	if m := v.Mirror("n1", nil); m.Value != "18" {
		t.Errorf("n1 after the pool grew: %q, want 18", m.Value)
	}
	if err := dyn.Resource(gvr).Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTold("the object went", "n1")
	if m := v.Mirror("n1", nil); !m.Invalid() {
		t.Errorf("n1 after its object went: %+v, want invalid", m)
	}

	// Without sources every node is read and covered by none.
	empty, err := NewView(dyn, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := empty.Mirror("n1", nil); m != Uncovered {
		t.Errorf("no sources: %+v, want Uncovered", m)
	}
}
