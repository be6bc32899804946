package schedplugin

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/names"
)

func versionedNode(name, rv, capacity string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	if capacity != "" {
		n.Annotations = map[string]string{names.UnderlayIPCapacityAnnotation: capacity}
	}
	return n
}

func TestCapacitiesFollowTheNodeVersion(t *testing.T) {
	cs := &capacities{def: 10}
	if got := cs.of(versionedNode("a", "1", "3")).IPs; got != 3 {
		t.Fatalf("first read = %d, want 3", got)
	}
	// The same version is answered from memory: the rule is not run again.
	same := versionedNode("a", "1", "5")
	if got := cs.of(same).IPs; got != 3 {
		t.Errorf("same resourceVersion = %d, want the remembered 3", got)
	}
	// A new version is read again, whatever was remembered.
	if got := cs.of(versionedNode("a", "2", "5")).IPs; got != 5 {
		t.Errorf("new resourceVersion = %d, want 5", got)
	}
	if got := cs.of(versionedNode("a", "3", "x")); got.IPs != 0 || got.Invalid == "" {
		t.Errorf("invalid annotation = %+v, want 0 and a reason", got)
	}
	if got := cs.of(versionedNode("a", "4", "")); got.IPs != 10 {
		t.Errorf("no annotation = %d, want the default 10", got.IPs)
	}
	// A Node without a version is never remembered.
	cs.of(versionedNode("b", "", "1"))
	if got := cs.of(versionedNode("b", "", "2")).IPs; got != 2 {
		t.Errorf("no resourceVersion = %d, want 2", got)
	}
	if cs.len() != 1 {
		t.Errorf("remembered %d nodes, want 1 (only a)", cs.len())
	}
	cs.forget(versionedNode("a", "4", ""))
	cs.of(versionedNode("c", "1", "1"))
	cs.forget(cache.DeletedFinalStateUnknown{Key: "c"})
	if cs.len() != 0 {
		t.Errorf("after both deletions %d nodes remembered, want 0", cs.len())
	}
}

type informerHandle struct {
	fwk.Handle
	f informers.SharedInformerFactory
}

func (h informerHandle) SharedInformerFactory() informers.SharedInformerFactory { return h.f }

// A deleted node leaves the memo, through the scheduler's Node informer.
func TestDeletedNodeIsForgotten(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	p, err := New(ctx, nil, informerHandle{f: f})
	if err != nil {
		t.Fatal(err)
	}
	pl := p.(*Plugin)
	f.Start(ctx.Done())
	n := versionedNode("gone", "", "3")
	created, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.WaitForCacheSync(ctx.Done())
	created.ResourceVersion = "7"
	pl.capacity(created)
	if pl.capacities.len() != 1 {
		t.Fatalf("remembered %d nodes, want 1", pl.capacities.len())
	}
	if err := client.CoreV1().Nodes().Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pl.capacities.len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the deleted node is still remembered after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
