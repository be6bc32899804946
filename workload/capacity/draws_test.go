package capacity

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestComputeDrawsAll (issue 49 §2): on a node whose pool draws all, the
// pods that ask for no IP hold one, and a replica of a template that asks
// for none takes one; a node the mirror has not read takes none.
func TestComputeDrawsAll(t *testing.T) {
	drawsAll := func(n *corev1.Node) {
		n.Annotations = map[string]string{names.UnderlayIPSourceCapacityAnnotation: "4", names.UnderlayIPDrawsAnnotation: underlay.DrawsAll}
	}
	nodes := []*corev1.Node{node("a", "64", "64Gi", 110, drawsAll)}
	pods := []*corev1.Pod{pod("a", corev1.PodRunning, rl("cpu", "1")), pod("a", corev1.PodRunning, rl(names.UnderlayIPResource, "1"))}
	plain := template(container(rl("cpu", "1"), nil))
	if got := Compute(Input{Template: plain, Nodes: nodes, Pods: pods}); got.Replicas != 2 {
		t.Errorf("plain template on a draws-all node of 4 with 2 holding: %d replicas, want 2", got.Replicas)
	}
	asks := template(container(rl("cpu", "1", names.UnderlayIPResource, "1"), nil))
	if got := Compute(Input{Template: asks, Nodes: nodes, Pods: pods}); got.Replicas != 2 {
		t.Errorf("underlay template: %d replicas, want 2", got.Replicas)
	}
	unread := []*corev1.Node{node("b", "64", "64Gi", 110)}
	if got := Compute(Input{Template: asks, Nodes: unread, AwaitCapacitySource: true}); got.Replicas != 0 {
		t.Errorf("a node the mirror has not read: %d replicas, want 0", got.Replicas)
	}
}
