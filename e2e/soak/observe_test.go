package soak

import (
	"context"
	"fmt"
	"testing"
	"time"

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

// TestBoundBy: a bind first seen late (the sampler's pod watch lagging)
// counts from the second after the apiserver stamped it; one seen at once,
// or with no stamp, from when it was seen.
func TestBoundBy(t *testing.T) {
	stamp := time.Date(2026, 11, 30, 15, 42, 37, 0, time.UTC)
	scheduled := func(status corev1.ConditionStatus) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(stamp.Add(-time.Hour))},
			{Type: corev1.PodScheduled, Status: status, LastTransitionTime: metav1.NewTime(stamp)},
		}}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		seen time.Time
		want time.Time
	}{
		{"seen 3 s late", scheduled(corev1.ConditionTrue), stamp.Add(3 * time.Second), stamp.Add(time.Second)},
		{"seen within the stamp's second", scheduled(corev1.ConditionTrue), stamp.Add(300 * time.Millisecond), stamp.Add(300 * time.Millisecond)},
		{"not stamped scheduled", scheduled(corev1.ConditionFalse), stamp.Add(3 * time.Second), stamp.Add(3 * time.Second)},
		{"no conditions", &corev1.Pod{}, stamp, stamp},
	} {
		if got := boundBy(tc.pod, tc.seen); !got.Equal(tc.want) {
			t.Errorf("%s: boundBy = %s, want %s", tc.name, got.Format(time.StampMilli), tc.want.Format(time.StampMilli))
		}
	}
}
