//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// mostFreeFirst places 12 pods one at a time, each preferring the last of
// three nodes, and checks each lands on a node with the most free IPs.
func mostFreeFirst(t *testing.T, s *stack.Stack, capacity map[string]int) {
	t.Helper()
	ctx := testContext(t, 3*time.Minute)
	const ns = "ranking"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	preferred := plane.NodeName(2)
	free := map[string]int{}
	for n, c := range capacity {
		free[n] = c
	}
	// One at a time: each pod is placed against the ledger the previous
	// bind left, so "most free" is exact.
	for i := range 12 {
		most := 0
		for _, f := range free {
			most = max(most, f)
		}
		p := underlayPod(ns, fmt.Sprintf("r%02d", i), "ranking")
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{preferred},
				}}},
			}},
		}}
		createPods(ctx, t, s, p)
		node := waitNodeName(ctx, t, s, ns, p.Name)
		if free[node] != most {
			t.Errorf("pod %s went to %s with %d free IPs; free before: %v", p.Name, node, free[node], free)
		}
		free[node]--
	}
	t.Logf("free IPs after 12 pods: %v", free)
}

// waitNodeName waits until the pod is bound and returns its node.
func waitNodeName(ctx context.Context, t *testing.T, s *stack.Stack, ns, name string) string {
	t.Helper()
	var node string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = p.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not bound: %v", ns, name, err)
	}
	return node
}
