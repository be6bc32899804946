package enipool

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// TestGrowerGrowsThePool: a node joins with 8 IPs free beyond the agent's
// router and health; as pods land the operator keeps 8 free, up to the
// m5.large's 27 addresses; a pod beyond them is one the agent has no IP
// for.
func TestGrowerGrowsThePool(t *testing.T) {
	ctx := t.Context()
	core := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{ciliumNodes: "CiliumNodeList"})
	g, err := New(ctx, slog.New(slog.DiscardHandler), core, dyn, 8)
	if err != nil {
		t.Fatal(err)
	}
	pool := func(want int) {
		t.Helper()
		var got int
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if err := g.step(ctx); err != nil {
				t.Fatal(err)
			}
			u, err := dyn.Resource(ciliumNodes).Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				continue
			}
			spec, _ := u.Object["spec"].(map[string]any)
			ipam, _ := spec["ipam"].(map[string]any)
			p, _ := ipam["pool"].(map[string]any)
			if got = len(p); got == want {
				return
			}
		}
		t.Fatalf("the CiliumNode's pool holds %d IPs, want %d", got, want)
	}
	pool(2 + 8)
	addPods(ctx, t, core, 0, 10)
	pool(2 + 10 + 8)
	addPods(ctx, t, core, 10, 30)
	pool(27)
	g.mu.Lock()
	held := len(g.agents["n1"].owner)
	g.mu.Unlock()
	if held != 27 {
		t.Fatalf("%d endpoints hold an IP, want the pool's 27", held)
	}
}

func addPods(ctx context.Context, t *testing.T, core *fake.Clientset, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("web-%d", i)}, Spec: corev1.PodSpec{NodeName: "n1"}}
		if _, err := core.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
