//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestCapacityLabelSurvivesNodeRecreation is issue 31's re-registration
// case, in both modes: a Node registered with the label
// capscale.io/underlay-ip-capacity=3 (a kubelet's --node-labels) under
// --default-capacity 10 is deleted and registered again with the same
// labels and no annotation, as the kubelet does. It must keep capacity 3:
// the extender's ledger (extender mode) or the published allocatable
// (native mode) says 3, and a burst pinned to it binds exactly 3 pods,
// never more at any poll.
func TestCapacityLabelSurvivesNodeRecreation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		native bool
	}{
		{name: "extender", native: false},
		{name: "native", native: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labelled, other := plane.NodeName(0), plane.NodeName(1)
			s := startStack(t, stack.Options{
				Plane: plane.Options{Nodes: 2, Logf: t.Logf, Node: func(i int, n *corev1.Node) {
					if i == 0 {
						n.Labels[names.UnderlayIPCapacityLabel] = "3"
					}
				}},
				Extender:     !tc.native,
				Native:       tc.native,
				ExtenderArgs: []string{"--default-capacity=10"},
			})
			ctx := testContext(t, 6*time.Minute)
			capacity := map[string]int{labelled: 3, other: 10}
			waitNodeCapacity(ctx, t, s, tc.native, capacity)

			recreateNode(ctx, t, s, labelled, tc.native)
			waitNodeCapacity(ctx, t, s, tc.native, capacity)

			const ns = "recreate"
			if err := s.WaitForNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			w := watchOverCommit(ctx, s, ns, capacity)
			var pods []*corev1.Pod
			for i := range 8 {
				p := underlayPod(ns, fmt.Sprintf("p%d", i), "recreate")
				p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: labelled}
				pods = append(pods, p)
			}
			createPods(ctx, t, s, pods...)
			waitUnderlay(ctx, t, s, ns, capacity, 3, 5)
			assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)
			w.check(t)
			if !tc.native {
				rep, err := capacityReport(ctx, s.ExtenderURL)
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range rep.Nodes {
					if n.Name == labelled && (n.Used != 3 || n.Free != 0) {
						t.Errorf("ledger of %s after the burst: used %d free %d, want 3 and 0", labelled, n.Used, n.Free)
					}
				}
			}
		})
	}
}

// waitNodeCapacity waits until every node's capacity is want where the mode
// keeps it: the extender's /capacity (known, no error) or the published
// Node status (capacity and allocatable).
func waitNodeCapacity(ctx context.Context, t *testing.T, s *stack.Stack, native bool, want map[string]int) {
	t.Helper()
	if native {
		w := map[string]int64{}
		for n, c := range want {
			w[n] = int64(c)
		}
		waitAllocatable(ctx, t, s, w, time.Minute)
		return
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rep, err := capacityReport(ctx, s.ExtenderURL)
		if err != nil {
			if last == "" {
				last = err.Error()
			}
			return false, nil
		}
		got := map[string]int{}
		for _, n := range rep.Nodes {
			if n.Known && n.CapacityError == "" {
				got[n.Name] = int(n.Capacity)
			}
		}
		for n, c := range want {
			if g, ok := got[n]; !ok || g != c {
				last = fmt.Sprintf("ledger capacities %v, want %v", got, want)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("extender capacity: %s", last)
	}
}

// recreateNode deletes the named Node and registers it again the way a
// kubelet does: its labels (the kubelet's --node-labels among them), its
// resources, and none of the annotations or the published underlay resource
// the old object had. It returns once the new Node is Ready and untainted and
// the mode has seen the deletion.
func recreateNode(ctx context.Context, t *testing.T, s *stack.Stack, name string, native bool) {
	t.Helper()
	old, err := s.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resources := corev1.ResourceList{}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		resources[r] = old.Status.Capacity[r]
	}
	fresh := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: old.Labels,
			Annotations: map[string]string{plane.KwokAnnotation: old.Annotations[plane.KwokAnnotation]}},
		Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources.DeepCopy()},
	}
	if err := s.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := s.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		if native {
			return true, nil
		}
		// The ledger must have forgotten the node, or the check after
		// re-creation could read the old object's capacity.
		rep, err := capacityReport(ctx, s.ExtenderURL)
		if err != nil {
			return false, nil
		}
		for _, n := range rep.Nodes {
			if n.Name == name && n.Known {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("node %s not gone: %v", name, err)
	}
	if _, err := s.Client.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
		t.Fatalf("re-creating node %s: %v", name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := s.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && plane.NodeReady(n) && len(n.Spec.Taints) == 0, nil
	})
	if err != nil {
		t.Fatalf("re-created node %s not Ready and untainted: %v", name, err)
	}
}
