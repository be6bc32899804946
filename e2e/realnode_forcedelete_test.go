//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// forceDeleteRounds are the deletions of TestRealNodeForceDelete, in
// order: a force delete (--grace-period=0 --force) and a graceful one,
// alternated.
var forceDeleteRounds = []bool{true, false, true, false}

// TestRealNodeForceDelete is issue 49 §5 on real nodes, in each mode. Real
// node 0 is capscale's: 10 underlay pods Running in its 10 IPs and an
// 11th Pending. Real node 1, the same host-local range, is left to the
// scheduler without capscale: its 10 pods ask for no IP, and its 11th is
// bound and stuck in ContainerCreating, the IPAM's failure. In each round a
// Running pod is deleted on each node, capscale's first, force-deleted or
// gracefully, and the time until the waiting pod runs there is measured.
// On capscale's node the replacement never meets "no IP addresses
// available" (no FailedCreatePodSandBox event at all): a force-deleted
// pod's IP is held until its node can have released it
// (underlay.HoldAfterDelete in plugin and extender mode; in native mode the
// release finalizer keeps the pod counted until the kubelet finished it),
// a gracefully deleted one is free once the kubelet has finished it.
func TestRealNodeForceDelete(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		s := startRealNodeStack(t, m.stack(plane.Options{}), 2)
		ctx := testContext(t, 8*time.Minute)
		withIPs, without := plane.RealNodeName(0), plane.RealNodeName(1)
		if s.Opts.Native {
			waitAllocatable(ctx, t, s, map[string]int64{withIPs: 10, without: 10}, time.Minute)
		}
		const ns = "freedip"
		if err := s.WaitForNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		var pods []*corev1.Pod
		for i := range 10 {
			pods = append(pods, onNode(realPod(ns, fmt.Sprintf("ip-%02d", i), 1), withIPs), onNode(realPod(ns, fmt.Sprintf("plain-%02d", i), 0), without))
		}
		createPods(ctx, t, s, pods...)
		if s.Opts.Native {
			checkReleaseFinalizer(ctx, t, s, ns, pods)
		}
		waitRealState(ctx, t, s, ns, 3*time.Minute, "10 Running on each real node", func(st realState) bool {
			return len(st.running[withIPs]) == 10 && len(st.running[without]) == 10
		})

		took := map[string][]time.Duration{}
		for round, force := range forceDeleteRounds {
			kind := map[bool]string{true: "force", false: "graceful"}[force]
			waiting := onNode(realPod(ns, fmt.Sprintf("ip-w%d", round), 1), withIPs)
			stuck := onNode(realPod(ns, fmt.Sprintf("plain-w%d", round), 0), without)
			createPods(ctx, t, s, waiting, stuck)
			waitRejected(ctx, t, s, ns, waiting.Name)
			waitStuck(ctx, t, s, ns, stuck.Name)

			d := replaceOne(ctx, t, s, ns, withIPs, waiting.Name, force)
			took["capscale "+kind] = append(took["capscale "+kind], d)
			failed, err := sandboxFailures(ctx, s, ns, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range failed {
				if !strings.HasPrefix(f, waiting.Name+":") {
					continue
				}
				t.Errorf("round %d (%s delete): capscale's replacement %s met the IPAM's failure: %s", round+1, kind, waiting.Name, f)
			}
			b := replaceOne(ctx, t, s, ns, without, stuck.Name, force)
			took["without "+kind] = append(took["without "+kind], b)
			t.Logf("round %d, %s mode, %s delete: the waiting pod Running %.1fs after on capscale's node, %.1fs on the node without capscale",
				round+1, m.name, kind, d.Seconds(), b.Seconds())
		}
		keys := make([]string, 0, len(took))
		for k := range took {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.Logf("time to Running, %s mode, %s: %s", m.name, k, spread(took[k]))
		}
		st, err := realPodState(ctx, s, ns)
		if err != nil {
			t.Fatal(err)
		}
		checkRunningIPs(t, []*plane.RealNode{realNode(t, s, withIPs)}, st)
	})
}

// onNode pins p to the real node named node.
func onNode(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeSelector["kubernetes.io/hostname"] = node
	return p
}

// waitStuck waits until pod name is bound and its sandbox has failed for
// want of an IP: the kubelet retries it on its backoff from then on.
func waitStuck(ctx context.Context, t *testing.T, s *stack.Stack, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		failed, err := sandboxFailures(ctx, s, ns, ipamExhausted)
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(failed, func(f string) bool { return strings.HasPrefix(f, name+":") }), nil
	})
	if err != nil {
		t.Fatalf("pod %s never failed for want of an IP: %v", name, err)
	}
}

// replaceOne deletes the first Running pod on node (with grace 0 when
// force, as kubectl delete --grace-period=0 --force does) and returns how
// long until pod waiting runs on node.
func replaceOne(ctx context.Context, t *testing.T, s *stack.Stack, ns, node, waiting string, force bool) time.Duration {
	t.Helper()
	st, victims := runningOn(ctx, t, s, ns, node)
	if len(victims) == 0 {
		t.Fatalf("no Running pod on %s: %s", node, st)
	}
	opts := metav1.DeleteOptions{}
	if force {
		opts.GracePeriodSeconds = ptr.To[int64](0)
	}
	start := time.Now()
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, victims[0], opts); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	waitRealState(ctx, t, s, ns, 2*time.Minute, waiting+" Running on "+node+" in "+victims[0]+"'s place", func(st realState) bool {
		if _, ok := st.running[node][waiting]; ok {
			took = time.Since(start)
			return true
		}
		return false
	})
	return took
}

// spread is the median of ds and their range, in seconds.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf("p50 %.1fs (%.1f–%.1fs, %d rounds)", med.Seconds(), s[0].Seconds(), s[len(s)-1].Seconds(), len(s))
}

// checkReleaseFinalizer: in native mode the pods that ask for an underlay
// IP carry the release finalizer (deploy/native/release.yaml), the others
// do not.
func checkReleaseFinalizer(ctx context.Context, t *testing.T, s *stack.Stack, ns string, pods []*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		got, err := s.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := underlay.PodNeed(p) > 0
		if has := slices.Contains(got.Finalizers, names.UnderlayIPReleaseFinalizer); has != want {
			t.Errorf("pod %s (needs %d IPs): finalizers %v, want %s: %v", p.Name, underlay.PodNeed(p), got.Finalizers, names.UnderlayIPReleaseFinalizer, want)
		}
	}
}
