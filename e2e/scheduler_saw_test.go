//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/stack"
)

const sawLabel = "e2e.capscale.io/scheduler-saw"

// schedulerSaw returns once kube-scheduler's cache holds node as the
// apiserver has it now, or later. Its Node and Pod watches are not ordered:
// a pod made just after a Node write may be placed against the node as it
// was (a capacity lowered in native mode, the pod bound into the old one).
// It labels the node and waits for a pod that may go only where the label
// is to be bound there: the label's write comes after every earlier write
// of the Node, and one watch delivers a Node's versions in order.
func schedulerSaw(ctx context.Context, t *testing.T, s *stack.Stack, node string) {
	t.Helper()
	v := strconv.FormatInt(time.Now().UnixNano(), 36)
	patch := []byte(`{"metadata":{"labels":{"` + sawLabel + `":"` + v + `"}}}`)
	if _, err := s.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	const ns = "scheduler-saw"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	p := plainPod(ns, "saw-"+v)
	p.Spec.NodeSelector = map[string]string{sawLabel: v}
	createPods(ctx, t, s, p)
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := s.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && got.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s, selecting node %s's new label, never bound: %v", ns, p.Name, node, err)
	}
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
