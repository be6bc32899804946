package soak

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/capscale/capscale/internal/names"
)

// TestObserverSeesEveryNodeAtStart: the first snapshot after newObserver
// returns knows every node's capacity. The informer's store fills before
// its handlers run, so an observer that waits only for the store lists
// nodes whose capacity it has not read yet (the 5000-node soak once sized
// its churn to a third of the cluster's IPs).
func TestObserverSeesEveryNodeAtStart(t *testing.T) {
	const n = 5000
	objs := make([]runtime.Object, 0, n)
	for i := range n {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i),
			Annotations: map[string]string{names.UnderlayIPCapacityAnnotation: "2"}}})
	}
	client := fake.NewClientset(objs...)
	for round := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		o, err := newObserver(ctx, client, 10, false)
		if err != nil {
			t.Fatal(err)
		}
		var s Sample
		o.snapshot(&s)
		cancel()
		var total int64
		for _, nd := range s.Nodes {
			total += nd.Capacity
		}
		if len(s.Nodes) != n || total != 2*n {
			t.Fatalf("round %d: first snapshot: %d nodes, %d IPs; want %d nodes, %d IPs", round, len(s.Nodes), total, n, 2*n)
		}
	}
}
