//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// realExhausted is what a Pending pod's PodScheduled condition says in each
// mode when both real nodes' ten IPs are taken.
var realExhausted = map[string]string{
	"dra":      "cannot allocate all claims",
	"extender": "underlay IPs exhausted: 10/10 used, pod needs 1",
	"plugin":   "underlay IPs exhausted: 10/10 used, pod needs 1",
	"native":   "Insufficient " + names.UnderlayIPResource,
}

// TestRealNodePrevented is the failure of TestRealNodeIPAMExhausted
// prevented, in each mode: 25 underlay pods for 2 real nodes of 10 IPs.
// Exactly 20 run, each with an IP of its node's range; 5 wait in Pending
// with capscale's reason; no sandbox ever fails for want of an IP; at every
// poll the IPs the IPAM handed out on a node are no more than capscale
// counts there, and capscale counts no more than the capacity (equal once
// settled). Then, three times, a Running pod is deleted and a Pending one
// runs on that node in its place, timed (BENCHMARKS.md).
func TestRealNodePrevented(t *testing.T) {
	forEachMode(t, realNodePrevented)
}

// draMode is DRA mode for TestRealNodePrevented's scenario: the plane's
// stock kube-scheduler allocates the devices capscale publishes, and the
// kubelets run the pods without a kubelet plugin, DRAOptionalNodeOperations
// (alpha) turned on in kube-apiserver, kube-scheduler and the kubelets and
// the slices of the nodes that declare it marked.
var draMode = schedulingMode{
	name: "dra",
	stack: func(po plane.Options) stack.Options {
		return stack.Options{Plane: po, DRA: true, DRASkipNodeOperations: true}
	},
}

// TestRealNodeDRA is TestRealNodePrevented in DRA mode (docs/dra.md): the
// failure shown, and prevented, on real nodes.
func TestRealNodeDRA(t *testing.T) { realNodePrevented(t, draMode) }

func realNodePrevented(t *testing.T, m schedulingMode) {
	s := startRealNodeStack(t, m.stack(plane.Options{}), 2)
	ctx := testContext(t, 5*time.Minute)
	if s.Opts.Native {
		waitAllocatable(ctx, t, s, map[string]int64{plane.RealNodeName(0): 10, plane.RealNodeName(1): 10}, time.Minute)
	}
	preventedScenario(ctx, t, s, "prevented", m.name+" mode", realExhausted[m.name])
}

// preventedScenario runs the failure capscale prevents on s's two real
// nodes of 10 IPs in namespace ns: 25 pods, 20 Running and 5 Pending with
// reason, three freed IPs each taken by a Pending pod on its node, and the
// IPAM never handing out more than capscale counted.
func preventedScenario(ctx context.Context, t *testing.T, s *stack.Stack, ns, label, reason string) {
	t.Helper()
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	watch := watchIPAM(ctx, t, s, s.RealNodes)
	var pods []*corev1.Pod
	for i := range 25 {
		pods = append(pods, realPod(ns, fmt.Sprintf("p-%02d", i), 1))
	}
	createPods(ctx, t, s, pods...)

	st := waitRealState(ctx, t, s, ns, 3*time.Minute, "20 Running, 5 Pending", func(st realState) bool {
		return st.runningCount() == 20 && len(st.creating) == 0 && len(st.pending) == 5
	})
	for _, n := range s.RealNodes {
		if got := len(st.running[n.Name]); got != 10 {
			t.Errorf("%s runs %d pods, want 10 (%s)", n.Name, got, st)
		}
	}
	checkRunningIPs(t, s.RealNodes, st)
	checkPendingReason(ctx, t, s, ns, st.pending, reason)
	waitIPAMSettled(ctx, t, watch, 10)

	// A freed IP: the deleted pod's IP goes back to the IPAM, and a
	// Pending pod gets it on that node.
	for round := range 3 {
		node := plane.RealNodeName(round % 2)
		took := freeOneIP(ctx, t, s, ns, node)
		t.Logf("freed-IP reuse, %s, round %d: a Pending pod Running on %s %.1fs after a Running pod there was deleted", label, round+1, node, took.Seconds())
	}
	st, err := realPodState(ctx, s, ns)
	if err != nil {
		t.Fatal(err)
	}
	if st.runningCount() != 20 || len(st.pending) != 2 {
		t.Errorf("after three IPs freed and taken: %s, want 20 Running and 2 Pending", st)
	}
	checkRunningIPs(t, s.RealNodes, st)
	checkIPAMNeverOver(ctx, t, s, ns, watch, 10)
}

// checkPendingReason checks that every pod in pending was turned away by
// the scheduler for want of underlay IPs, in the mode's words.
func checkPendingReason(ctx context.Context, t *testing.T, s *stack.Stack, ns string, pending []string, reason string) {
	t.Helper()
	for _, name := range pending {
		var msg string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					msg = c.Message
				}
			}
			return strings.Contains(msg, reason), nil
		})
		if err != nil {
			t.Errorf("pending pod %s: PodScheduled says %q, want %q", name, msg, reason)
		}
	}
}

// waitIPAMSettled waits until every real node's IPAM and capscale both count
// want.
// checkIPAMNeverOver waits for watch to settle at want per node, ends it,
// and fails the test for any poll where the IPAM handed out more than
// capscale counted, and for any failed sandbox in ns.
func checkIPAMNeverOver(ctx context.Context, t *testing.T, s *stack.Stack, ns string, watch *ipamWatch, want int) {
	t.Helper()
	waitIPAMSettled(ctx, t, watch, want)
	watch.end()
	polls := watch.check(t)
	failed, err := sandboxFailures(ctx, s, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Errorf("%d sandboxes failed; first: %s", len(failed), failed[0])
	}
	t.Logf("%d polls: the IPAM never handed out more than capscale counted", polls)
}

func waitIPAMSettled(ctx context.Context, t *testing.T, w *ipamWatch, want int) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var ok bool
		ok, last = w.settled(want)
		return ok, nil
	})
	if err != nil {
		t.Errorf("the IPAM and capscale never both counted %d on every real node: %s", want, last)
	}
}

// freeOneIP deletes a Running pod of ns on node and returns how long it
// took until a pod that was Pending runs on node, with an IP of its range.
func freeOneIP(ctx context.Context, t *testing.T, s *stack.Stack, ns, node string) time.Duration {
	t.Helper()
	before, victims := runningOn(ctx, t, s, ns, node)
	if len(victims) == 0 || len(before.pending) == 0 {
		t.Fatalf("nothing to free on %s: %s", node, before)
	}
	waiting := map[string]bool{}
	for _, p := range before.pending {
		waiting[p] = true
	}
	start := time.Now()
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, victims[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	st := waitRealState(ctx, t, s, ns, 2*time.Minute, "a Pending pod Running on "+node+" in "+victims[0]+"'s place", func(st realState) bool {
		for p := range st.running[node] {
			if waiting[p] {
				took = time.Since(start)
				return true
			}
		}
		return false
	})
	n := realNode(t, s, node)
	for p, ip := range st.running[node] {
		if waiting[p] && !n.InRange(ip) {
			t.Errorf("pod %s took IP %s on %s, outside %s-%s", p, ip, node, n.RangeStart, n.RangeEnd)
		}
	}
	return took
}
