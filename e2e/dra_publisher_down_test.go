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

// draPublisherDown is the failure matrix's row for DRA mode's device
// publisher (docs/operations.md). With the extender that publishes
// killed, kube-scheduler keeps allocating the devices last published,
// exactly: it counts the claims itself, so nothing goes over. A budget
// raised meanwhile waits for the publisher; a pod that asks for no IP
// schedules as ever. Once the publisher is back it publishes the new
// budget and the waiting pods bind.
func draPublisherDown(ctx context.Context, t *testing.T, s *stack.Stack) {
	const ns = "dra-publisher-down"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	n1 := plane.NodeName(1) // 3 IPs by annotation
	waitDevices(ctx, t, s, n1, 3, 0)

	s.KillExtender()
	down := time.Now()
	annotateCapacity(ctx, t, s, n1, "5")
	var pods []*corev1.Pod
	for i := range 5 {
		p := underlayPod(ns, fmt.Sprintf("p-%d", i), "p")
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n1}
		pods = append(pods, p)
	}
	createPodsInOrder(ctx, t, s, pods...)
	// The slice last published holds 3: exactly 3 bound, for as long as
	// the publisher is down, and the raised budget is not published.
	stayBoundPending(ctx, t, s, ns, 3, 2, 3*time.Second)
	waitDevices(ctx, t, s, n1, 3, 3)

	// The cluster's own pods do not wait on it.
	const sysNS = "kube-system"
	plain := plainPod(sysNS, "dra-publisher-down-plain")
	plain.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n1}
	createPods(ctx, t, s, plain)
	waitPodBound(ctx, t, s, sysNS, plain.Name)
	t.Logf("publisher down %s: 3 of 5 underlay pods bound on the 3 devices last published, a kube-system pod bound", time.Since(down).Round(10*time.Millisecond))

	back := time.Now()
	if err := s.StartExtender(ctx); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	waitBoundCount(ctx, t, s, ns, 5)
	waitDevices(ctx, t, s, n1, 5, 5)
	t.Logf("publisher back: ready %s after its start, the 2 waiting pods bound on the raised budget %s after it was ready",
		ready.Sub(back).Round(10*time.Millisecond), time.Since(ready).Round(10*time.Millisecond))

	if err := s.Client.CoreV1().Pods(sysNS).Delete(ctx, plain.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteAll(ctx, t, s, ns)
	annotateCapacity(ctx, t, s, n1, "3")
	waitDevices(ctx, t, s, n1, 3, 0)
}

// waitPodBound waits until ns/name is bound.
func waitPodBound(ctx context.Context, t *testing.T, s *stack.Stack, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not bound: %v", ns, name, err)
	}
}
