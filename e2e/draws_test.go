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

// Issue 49 §2 and §4 on a kwok plane, in each mode, with a capacity source
// of the test's own (the own-ipam CRD of capacity_sources_test.go).

// ownIPAMSource is own-ipam's source file with the given draws, for the
// kwok nodes.
func ownIPAMSource(draws string) string {
	return ownIPAMSourceSelecting(draws, "{matchLabels: {type: kwok}}")
}

// ownIPAMSourceSelecting is own-ipam's source file with the given draws
// and nodeSelector ("" for none, as the chart's default source has none).
func ownIPAMSourceSelecting(draws, selector string) string {
	s := fmt.Sprintf(`sources:
- name: own-ipam
  resource: {group: ipam.example.com, version: v1, resource: nodeippools}
  node: object.spec.nodeName
  capacity: object.status.allocatable
  draws: %s`, draws)
	if selector != "" {
		s += "\n  nodeSelector: " + selector
	}
	return s
}

// ownIPAM is the own-ipam entry of capacitySources.
func ownIPAM(t *testing.T) ipamSource {
	for _, src := range capacitySources {
		if src.name == "own-ipam" {
			return src
		}
	}
	t.Fatal("no own-ipam source")
	return ipamSource{}
}

// podNetworkPods counts, per kwok node, the bound, non-terminal pods of every
// namespace that are not hostNetwork: the IPs a draws-all pool hands out.
func podNetworkPods(ctx context.Context, s *stack.Stack) (map[string]int, error) {
	pods, err := s.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out[p.Spec.NodeName]++
	}
	return out, nil
}

// TestDrawsAll (issue 49 §2): two nodes whose pools (3 and 2 IPs) serve
// every pod-network pod. Two unmarked pods of an unlabelled namespace are
// placed before deploy/capacity-sources/draws-all.yaml exists (they escape it and
// are charged by the rule); with its policies applied (the IP and
// capscale-scheduler), a burst of 4 more unmarked pods and 6 marked pods,
// 12 in all for 5 IPs: polled during the burst, no node ever holds more
// pod-network pods than its pool, and exactly 5 hold one at the end.
func TestDrawsAll(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		src := ownIPAM(t)
		o := m.stack(plane.Options{Nodes: 2, Logf: t.Logf})
		o.CapacitySources = ownIPAMSource("all")
		o.Prepare = func(ctx context.Context, s *stack.Stack) error { return src.crd(ctx, s) }
		s := startStack(t, o)
		ctx := testContext(t, 5*time.Minute)
		n0, n1 := plane.NodeName(0), plane.NodeName(1)
		pool := map[string]int{n0: 3, n1: 2}
		putObject(ctx, t, s, src.gvr, src.object(n0, "", 3))
		putObject(ctx, t, s, src.gvr, src.object(n1, "", 2))
		waitMirrored(ctx, t, s, n0, is(3), 3)
		waitMirrored(ctx, t, s, n1, is(2), 2)

		const plain, marked = "plain", "marked"
		for _, ns := range []string{plain, marked} {
			if err := s.WaitForNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
		}
		// Placed before the policy: they ask for nothing.
		createPods(ctx, t, s, plainPod(plain, "early-0"), plainPod(plain, "early-1"))
		var early map[string]int
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			u, err := podNetworkPods(ctx, s)
			early = u
			return err == nil && u[n0]+u[n1] == 2, nil
		}); err != nil {
			t.Fatalf("the early pods were not placed: %v", err)
		}
		if s.Opts.Native {
			// The publisher leaves what they draw out of allocatable.
			waitAllocatable(ctx, t, s, map[string]int64{n0: int64(3 - early[n0]), n1: int64(2 - early[n1])}, 30*time.Second)
		}
		if s.Opts.Native {
			// draws-all.yaml moves default-scheduler pods to
			// capscale-scheduler, which native mode's plane lacks.
			if _, err := s.StartNativeSchedulerReplica(ctx, "capscale-scheduler"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Kubectl(ctx, "apply", "-f", stack.DeployFile("capacity-sources/draws-all.yaml")); err != nil {
			t.Fatal(err)
		}
		waitPolicyGivesIP(ctx, t, s, plain)

		watch := startPollWatch(ctx, 50*time.Millisecond, func(ctx context.Context) (string, bool) {
			u, err := podNetworkPods(ctx, s)
			if err != nil {
				return "", false
			}
			return overCapacity(u, pool), true
		})
		var burst []*corev1.Pod
		for i := range 4 {
			burst = append(burst, plainPod(plain, fmt.Sprintf("late-%d", i)))
		}
		for i := range 6 {
			burst = append(burst, underlayPod(marked, fmt.Sprintf("m-%d", i), "m"))
		}
		createPods(ctx, t, s, burst...)
		var last map[string]int
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			u, err := podNetworkPods(ctx, s)
			last = u
			return err == nil && u[n0]+u[n1] == 5, nil
		})
		if err != nil {
			t.Fatalf("want 5 pod-network pods placed, have %v: %v", last, err)
		}
		time.Sleep(3 * time.Second)
		watch.check(t, "pod-network pods within the pools (3 and 2)")
		if u, err := podNetworkPods(ctx, s); err != nil || u[n0]+u[n1] != 5 {
			t.Fatalf("after the burst: %v, %v; want 5 placed", u, err)
		}
	})
}

// waitPolicyGivesIP waits until a pod created in ns comes back from
// admission with an underlay IP and capscale-scheduler: the API server
// loads each new policy on its own in a moment.
func waitPolicyGivesIP(ctx context.Context, t *testing.T, s *stack.Stack, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(ns).Create(ctx, plainPod(ns, "probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, nil
		}
		_, ok := p.Spec.Containers[0].Resources.Limits[corev1.ResourceName("capscale.io/underlay-ip")]
		return ok && p.Spec.SchedulerName == "capscale-scheduler", nil
	})
	if err != nil {
		t.Fatalf("the draws-all policy gives no IP: %v", err)
	}
}

// TestNodeWaitsForTheMirror (issue 49 §4): with the components configured
// as deploy/capacity-sources and the chart configure them, and a source
// without a nodeSelector as the chart's default one:
//   - a node re-created while capscale-controller is stopped (a new node's
//     Node has none of the mirror's annotations) takes no underlay pod
//     until the mirror has read its object, and then exactly what the
//     object says (without the setting it took the default of 10);
//   - a node that joins before its IPAM object exists (the Cilium agent
//     writes its CiliumNode only once it runs there) takes none until the
//     object comes, and then exactly what it says (before, the mirror
//     marked it "no source" and it took the default of 10).
func TestNodeWaitsForTheMirror(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) { nodeWaitsForTheMirror(t, m, false) })
}

func nodeWaitsForTheMirror(t *testing.T, m schedulingMode, noAwait bool) {
	src := ownIPAM(t)
	o := m.stack(plane.Options{Nodes: 2, Logf: t.Logf})
	o.CapacitySources = ownIPAMSourceSelecting("marked", "")
	o.NoAwaitCapacitySource = noAwait
	// The mirror's own test: in native mode the publisher reads the
	// sources by default (TestNativeReadsCapacitySources).
	o.NativeMirror = o.Native && !noAwait
	o.Prepare = func(ctx context.Context, s *stack.Stack) error { return src.crd(ctx, s) }
	s := startStack(t, o)
	ctx := testContext(t, 5*time.Minute)
	n0, n1 := plane.NodeName(0), plane.NodeName(1)
	putObject(ctx, t, s, src.gvr, src.object(n0, "", 3))
	putObject(ctx, t, s, src.gvr, src.object(n1, "", 2))
	waitMirrored(ctx, t, s, n1, is(2), 2)

	s.Controller.Stop(5 * time.Second)
	recreateNode(ctx, t, s, n1, m.name != "extender")
	const ns = "fresh"
	if reason := pinnedPending(ctx, t, s, ns, n1, 3); !strings.Contains(reason, "not read yet") && !strings.Contains(reason, "Insufficient") {
		t.Errorf("FailedScheduling says %q, want the node not read yet", reason)
	}

	start := time.Now()
	r, err := s.StartController(ctx, "controller-2")
	if err != nil {
		t.Fatal(err)
	}
	s.Controller = r
	waitUnderlay(ctx, t, s, ns, map[string]int{n1: 2}, 2, 1)
	t.Logf("%s mode: the mirror back to 2 pods bound on the re-created node in %s", m.name, time.Since(start).Round(time.Millisecond))
	stayBoundPending(ctx, t, s, ns, 2, 1, 2*time.Second)
	if noAwait {
		return
	}

	// A node joins before its IPAM object: n0 again, its object gone.
	deleteObject(ctx, t, s, src.gvr, src.object(n0, "", 3))
	recreateNode(ctx, t, s, n0, m.name != "extender")
	const joined = "joined"
	want := "no nodeippools.ipam.example.com object maps to this node"
	if m.name == "native" {
		// kube-scheduler's own fit: the publisher published the IPs in use.
		want = "Insufficient " + names.UnderlayIPResource
	}
	if reason := pinnedPending(ctx, t, s, joined, n0, 4); !strings.Contains(reason, want) {
		t.Errorf("FailedScheduling says %q, want %q", reason, want)
	}
	start = time.Now()
	putObject(ctx, t, s, src.gvr, src.object(n0, "", 3))
	waitUnderlay(ctx, t, s, joined, map[string]int{n0: 3}, 3, 1)
	t.Logf("%s mode: the object to 3 pods bound on the node that joined before it in %s", m.name, time.Since(start).Round(time.Millisecond))
	stayBoundPending(ctx, t, s, joined, 3, 1, 2*time.Second)
}

// pinnedPending creates n underlay pods in ns pinned to node, checks that
// none binds for 4 s, and returns their FailedScheduling messages.
func pinnedPending(ctx context.Context, t *testing.T, s *stack.Stack, ns, node string, n int) string {
	t.Helper()
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	createPods(ctx, t, s, pinnedPods(ns, node, n)...)
	stayBoundPending(ctx, t, s, ns, 0, n, 4*time.Second)
	return failedSchedulingReasons(ctx, s, ns)
}

// pinnedPods are n underlay pods of ns (one IP each) pinned to node.
func pinnedPods(ns, node string, n int) []*corev1.Pod {
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = underlayPod(ns, fmt.Sprintf("p-%d", i), "p")
		pods[i].Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	}
	return pods
}

// failedSchedulingReasons joins the FailedScheduling messages of ns.
func failedSchedulingReasons(ctx context.Context, s *stack.Stack, ns string) string {
	var out []string
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
		if err != nil {
			return false, nil
		}
		out = out[:0]
		for _, e := range events.Items {
			out = append(out, e.Message)
		}
		return len(out) > 0, nil
	})
	return strings.Join(out, " | ")
}
