//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// TestRealNodeIPAMExhausted shows the failure capscale exists to prevent,
// on a real kubelet: no capscale, the stock kube-scheduler, pods that ask
// for no underlay IP. Twelve go to a real node whose IPAM holds ten
// addresses (kube-scheduler sees room for 110 pods): ten run with an IP of
// the node's range, two stay in ContainerCreating, and their events carry
// host-local's "no IP addresses available". A Running pod deleted then,
// one of the two gets its IP when the kubelet retries (its backoff, timed:
// BENCHMARKS.md).
func TestRealNodeIPAMExhausted(t *testing.T) {
	s := startRealNodeStack(t, stack.Options{}, 1)
	ctx := testContext(t, 4*time.Minute)
	const ns = "exhausted"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for i := range 12 {
		pods = append(pods, realPod(ns, fmt.Sprintf("p-%02d", i), 0))
	}
	createPods(ctx, t, s, pods...)

	st := waitIPAMStuck(ctx, t, s, ns, 2*time.Minute, 10, 2, ipamExhausted)
	checkRunningIPs(t, s.RealNodes, st)
	failed, err := sandboxFailures(ctx, s, ns, ipamExhausted)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the IPAM's own words, in the stuck pods' events: %s", failed[0])

	// Still stuck a while later: the kubelet retries and the IPAM still
	// has nothing; nothing else frees an address.
	for _, name := range st.creating {
		p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodPending || p.Status.PodIP != "" || waitingReason(p) != "ContainerCreating" {
			t.Errorf("pod %s: phase %s, IP %q, waiting %q; want Pending in ContainerCreating without an IP", name, p.Status.Phase, p.Status.PodIP, waitingReason(p))
		}
	}

	// An IP freed: the kubelet retries the stuck sandboxes on its backoff.
	stuck := map[string]bool{st.creating[0]: true, st.creating[1]: true}
	var victim string
	for p := range st.running[plane.RealNodeName(0)] {
		victim = p
	}
	start := time.Now()
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	waitRealState(ctx, t, s, ns, 2*time.Minute, "a stuck pod Running in "+victim+"'s place", func(st realState) bool {
		for p := range st.running[plane.RealNodeName(0)] {
			if stuck[p] {
				took = time.Since(start)
				return true
			}
		}
		return false
	})
	t.Logf("freed-IP reuse without capscale: a ContainerCreating pod Running %.1fs after a Running pod was deleted (the kubelet's backoff)", took.Seconds())
}

// waitingReason is the reason the pod's first container waits, if it does.
func waitingReason(p *corev1.Pod) string {
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil {
			return c.State.Waiting.Reason
		}
	}
	return ""
}
