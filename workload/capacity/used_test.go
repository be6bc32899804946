package capacity

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/names"
)

// TestComputeIPAMUsed: the maximum counts a node's free underlay IPs by
// the one rule: capacity less the larger of the pods' requests and what
// the IPAM reports in use.
func TestComputeIPAMUsed(t *testing.T) {
	reported := func(n *corev1.Node) {
		n.Annotations = map[string]string{names.UnderlayIPCapacityAnnotation: "3", names.UnderlayIPSourceUsedAnnotation: "3"}
	}
	got := Compute(Input{
		Template: template(container(nil, rl(names.UnderlayIPResource, "1"))),
		Nodes:    []*corev1.Node{node("a", "8", "10Gi", 110, reported), node("b", "8", "10Gi", 110, ipCapacity("3"))},
		Pods:     []*corev1.Pod{pod("a", corev1.PodRunning, rl(names.UnderlayIPResource, "1"))},
	})
	if got.Replicas != 3 {
		t.Fatalf("replicas %d, want 3: none on a (its IPAM holds all 3), 3 on b", got.Replicas)
	}
}
