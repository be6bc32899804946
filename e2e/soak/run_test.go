package soak

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/internal/names"
)

// TestCapacityFor: above largeCluster the default nodes hold 2 IPs, and the
// 3, 0 and invalid nodes stay as they are; at or below it nothing changes.
func TestCapacityFor(t *testing.T) {
	annotation := func(nodes, i int) string {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		capacityFor(nodes)(i, n)
		v, ok := n.Annotations[names.UnderlayIPCapacityAnnotation]
		if !ok {
			return "default"
		}
		return v
	}
	for _, c := range []struct {
		nodes, i int
		want     string
	}{
		{1000, 0, "default"}, {1000, 1, "3"}, {1000, 2, "0"}, {1000, 3, "many"},
		{5000, 0, "2"}, {5000, 1, "3"}, {5000, 2, "0"}, {5000, 3, "many"}, {5000, 4999, "2"},
	} {
		if got := annotation(c.nodes, c.i); got != c.want {
			t.Errorf("%d nodes, node %d: annotation %s, want %s", c.nodes, c.i, got, c.want)
		}
	}
}
