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

// TestComputeIPAMUnion (issue 55 §3): a pod bound before its CNI ADD is
// not in the IPAM's report yet: the maximum charges it beside the report.
func TestComputeIPAMUnion(t *testing.T) {
	reported := func(n *corev1.Node) {
		n.Annotations = map[string]string{names.UnderlayIPCapacityAnnotation: "3", names.UnderlayIPSourceUsedAnnotation: "2"}
	}
	running := pod("a", corev1.PodRunning, rl(names.UnderlayIPResource, "1"))
	running.Status.PodIPs = []corev1.PodIP{{IP: "192.0.2.10"}}
	got := Compute(Input{
		Template: template(container(nil, rl(names.UnderlayIPResource, "1"))),
		Nodes:    []*corev1.Node{node("a", "8", "10Gi", 110, reported)},
		Pods:     []*corev1.Pod{running, pod("a", corev1.PodPending, rl(names.UnderlayIPResource, "1"))},
	})
	if got.Replicas != 0 {
		t.Fatalf("replicas %d, want 0: the IPAM lists 2, and a bound pod has no IP yet", got.Replicas)
	}
}
