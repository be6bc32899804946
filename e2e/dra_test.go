//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/extender/devices"
	"github.com/capscale/capscale/internal/ipreport"
	"github.com/capscale/capscale/internal/names"
)

// draCapacity is node i's capacity in TestDRAMode and how it is set:
// 0 and 3 by annotation, an invalid annotation (0), 4 by label, 10 by
// default twice, and 3 each from the own-ipam capacity source on the last
// two nodes.
func draCapacity(i int) (annotation, label string, capacity int) {
	switch i {
	case 0:
		return "0", "", 0
	case 1:
		return "3", "", 3
	case 2:
		return "lots", "", 0
	case 3:
		return "", "4", 4
	case 4, 5:
		return "", "", 10
	}
	return "", "", 3
}

const draNodes = 8

// TestDRAMode is DRA mode (docs/dra.md) on one plane of eight kwok nodes:
// capscale's extender publishes each node's IPs as devices
// (--publish-devices) and the plane's stock kube-scheduler v1.37.2 alone
// allocates them, through the DeviceClass of deploy/dra. Its subtests run
// in order on the one plane:
//   - device models: the probe of docs/design/dra-devices.md;
//   - burst: 45 underlay pods for 33 IPs, polled while they come, never a
//     node over, exactly 33 bound; each bound pod's claim holds its IPs as
//     devices of its node, each pool publishes its budget, and kubectl
//     capscale ips shows those budgets and claims;
//   - workload API maximum: the workload API's answer is the free devices,
//     and scaling to it through the API binds every pod, one more waits;
//   - metrics: the extender's capacity, used-IP and device gauges equal
//     the budgets and what the claims hold (dra_readers_test.go);
//   - most free first: kube-scheduler's NodeResourcesFit scores the
//     DRA-backed resource (the free fraction, weight 10);
//   - freed IP reused at once: a deleted pod's IP goes to the waiting pod;
//   - capacity source: the own-ipam source raises and lowers a budget;
//     under allocated claims nothing is free beyond it, nothing evicted;
//   - draws-all: the draws-all policy's pods, on default-scheduler, counted
//     by it with no second scheduler;
//   - publisher down: the failure matrix's row (dra_publisher_down_test.go);
//   - kustomize: deploy/ with the component deploy/dra renders and the
//     plane's kube-apiserver accepts it (server-side dry run).
func TestDRAMode(t *testing.T) {
	src := ownIPAM(t)
	o := stack.Options{
		Plane: plane.Options{Nodes: draNodes, Logf: t.Logf, Node: func(i int, n *corev1.Node) {
			a, l, _ := draCapacity(i)
			if a != "" {
				n.Annotations[names.UnderlayIPCapacityAnnotation] = a
			}
			if l != "" {
				n.Labels[names.UnderlayIPCapacityLabel] = l
			}
			if i >= 6 {
				n.Labels[sourceLabel] = "own-ipam"
			}
		}},
		DRA:                   true,
		WorkloadAPI:           true,
		CapacitySources:       ownIPAMSourceSelecting("marked", "{matchLabels: {"+sourceLabel+": own-ipam}}"),
		NoAwaitCapacitySource: true,
		Prepare:               func(ctx context.Context, s *stack.Stack) error { return src.crd(ctx, s) },
	}
	s := startStack(t, o)
	ctx := testContext(t, 12*time.Minute)
	capacity := map[string]int{}
	total := 0
	for i := range draNodes {
		_, _, c := draCapacity(i)
		capacity[plane.NodeName(i)] = c
		total += c
	}
	for i := 6; i < draNodes; i++ {
		putObject(ctx, t, s, src.gvr, src.object(plane.NodeName(i), "", 3))
		waitMirrored(ctx, t, s, plane.NodeName(i), is(3), 3)
	}
	for node, c := range capacity {
		waitDevices(ctx, t, s, node, c, 0)
	}
	// docs/dra.md's command: one slice per node.
	out, err := s.Kubectl(ctx, "get", "resourceslices", "--field-selector", "spec.driver="+devices.Driver)
	if err != nil {
		t.Fatal(err)
	}
	for node := range capacity {
		if !strings.Contains(out, devices.SliceName(node, 0)) {
			t.Errorf("kubectl get resourceslices does not show %s:\n%s", devices.SliceName(node, 0), out)
		}
	}

	t.Run("device models", func(t *testing.T) { probeModels(ctx, t, s.Plane) })
	t.Run("burst", func(t *testing.T) { draBurst(ctx, t, s, capacity, total) })
	t.Run("workload API maximum", func(t *testing.T) { draWorkloadMax(ctx, t, s, total) })
	t.Run("metrics", func(t *testing.T) { draMetrics(ctx, t, s, total) })
	t.Run("most free first", func(t *testing.T) { draMostFree(ctx, t, s) })
	t.Run("freed IP reused at once", func(t *testing.T) { draReuse(ctx, t, s) })
	t.Run("capacity source", func(t *testing.T) { draSource(ctx, t, s, src) })
	t.Run("draws-all", func(t *testing.T) { draDrawsAll(ctx, t, s) })
	t.Run("publisher down", func(t *testing.T) { draPublisherDown(ctx, t, s) })
	t.Run("kustomize deploy/dra applies", func(t *testing.T) { draKustomizeApplies(ctx, t, s) })
}

// draBurst: three Deployments of 15 underlay pods each for 33 IPs.
func draBurst(ctx context.Context, t *testing.T, s *stack.Stack, capacity map[string]int, total int) {
	const ns = "dra-burst"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	watch := startPollWatch(ctx, 100*time.Millisecond, func(ctx context.Context) (string, bool) {
		perNode, _, _, err := underlayUsage(ctx, s, ns)
		if err != nil {
			return "", false
		}
		claimed, err := claimedPerNode(ctx, s)
		if err != nil {
			return "", false
		}
		return overCapacity(perNode, capacity) + overCapacity(claimed, capacity), true
	})
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, name, 15, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUnderlay(ctx, t, s, ns, capacity, total, 45-total)
	// The watch looked before the Deployments were created, every 100 ms
	// while their pods were bound, and once more now.
	watch.check(t, "pods and claims within each node's budget")
	// Each bound pod's IPs are devices of its own node's pool.
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := claimedPerNode(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	perNode, _, _, _ := underlayUsage(ctx, s, ns)
	for node, n := range perNode {
		if claimed[node] != n {
			t.Errorf("node %s: its pods ask for %d IPs, its claims hold %d devices", node, n, claimed[node])
		}
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.Status.ExtendedResourceClaimStatus == nil {
			t.Errorf("pod %s bound with no extended-resource claim", p.Name)
		}
	}
	// kubectl capscale ips reads the same numbers: the rule's capacity,
	// and as used what the claims hold, node by node.
	out, err := exec.CommandContext(ctx, filepath.Join(capscaleBin, "kubectl-capscale"), "ips", "-o", "json", "--kubeconfig", s.Kubeconfig).Output()
	if err != nil {
		t.Fatalf("kubectl capscale ips: %v", err)
	}
	var rep ipreport.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	for _, n := range rep.Nodes {
		if n.Capacity != int64(capacity[n.Name]) || n.Used != int64(claimed[n.Name]) {
			t.Errorf("kubectl capscale ips: %s capacity %d used %d; devices budget %d, claimed %d", n.Name, n.Capacity, n.Used, capacity[n.Name], claimed[n.Name])
		}
	}
	msg := failedSchedulingReasons(ctx, s, ns)
	t.Logf("a Pending pod's FailedScheduling: %s", firstLine(msg))
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if err := s.Client.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitNoPodsNorClaims(ctx, t, s, ns)
}

// draMostFree: node 4 holds 6 of its 10 IPs, node 5 none but half its CPU;
// a pod that may go to either goes to node 5, the one with the most IPs
// free, though CPU alone would rank node 4 first.
func draMostFree(ctx context.Context, t *testing.T, s *stack.Stack) {
	const ns = "dra-rank"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	n4, n5 := plane.NodeName(4), plane.NodeName(5)
	var pods []*corev1.Pod
	for i := range 6 {
		p := underlayPod(ns, fmt.Sprintf("ips-%d", i), "fill")
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n4}
		pods = append(pods, p)
	}
	cpu := plainPod(ns, "cpu")
	cpu.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n5}
	cpu.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}
	pods = append(pods, cpu)
	createPods(ctx, t, s, pods...)
	waitBoundCount(ctx, t, s, ns, 7)
	probe := underlayPod(ns, "probe", "probe")
	probe.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{n4, n5}}}}}}}}
	createPods(ctx, t, s, probe)
	waitBoundCount(ctx, t, s, ns, 8)
	got, err := s.Client.CoreV1().Pods(ns).Get(ctx, "probe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != n5 {
		t.Errorf("the pod went to %s, want %s (4 of 10 IPs free there against 10 of 10)", got.Spec.NodeName, n5)
	}
	deleteAll(ctx, t, s, ns)
}

// draReuse: node 1's 3 IPs taken, a fourth pod waits; one deleted, the
// waiting pod is bound to its IP within seconds.
func draReuse(ctx context.Context, t *testing.T, s *stack.Stack) {
	const ns = "dra-reuse"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	n1 := plane.NodeName(1)
	var pods []*corev1.Pod
	for i := range 4 {
		p := gracefulPod(underlayPod(ns, fmt.Sprintf("p-%d", i), "p"))
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n1}
		pods = append(pods, p)
	}
	createPodsInOrder(ctx, t, s, pods...)
	stayBoundPending(ctx, t, s, ns, 3, 1, time.Second)
	list, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var victim string
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			victim = p.Name
			break
		}
	}
	start := time.Now()
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, b, p, err := underlayUsage(ctx, s, ns)
		return err == nil && b == 3 && p == 0, nil
	})
	if err != nil {
		t.Fatalf("the waiting pod did not take the freed IP: %v", err)
	}
	t.Logf("the freed IP bound to the waiting pod %s after the delete", time.Since(start).Round(10*time.Millisecond))
	deleteAll(ctx, t, s, ns)
}

// draSource: node 6's budget from the own-ipam source, 3: raised to 5
// while 3 pods wait, 2 of them bound; lowered to 1 under 5 running pods:
// none evicted, its pool publishes no device; one of them deleted, the
// waiting pod still does not fit; back to 6, it does. Polled throughout:
// node 6's claims never hold more than 5 devices.
func draSource(ctx context.Context, t *testing.T, s *stack.Stack, src ipamSource) {
	const ns = "dra-source"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	n6 := plane.NodeName(6)
	var pods []*corev1.Pod
	for i := range 6 {
		p := underlayPod(ns, fmt.Sprintf("p-%d", i), "p")
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n6}
		pods = append(pods, p)
	}
	createPods(ctx, t, s, pods...)
	stayBoundPending(ctx, t, s, ns, 3, 3, time.Second)
	watch := startPollWatch(ctx, 100*time.Millisecond, func(ctx context.Context) (string, bool) {
		claimed, err := claimedPerNode(ctx, s)
		if err != nil {
			return "", false
		}
		return overCapacity(claimed, map[string]int{n6: 5}), true
	})
	start := time.Now()
	putObject(ctx, t, s, src.gvr, src.object(n6, "", 5))
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, b, p, err := underlayUsage(ctx, s, ns)
		return err == nil && b == 5 && p == 1, nil
	})
	if err != nil {
		t.Fatalf("raised to 5: %v", err)
	}
	t.Logf("the source's object raised to 5: 2 more pods bound in %s", time.Since(start).Round(10*time.Millisecond))
	waitDevices(ctx, t, s, n6, 5, 5)

	// Lowered to 1 under 5 claims: nothing published, so that a claim
	// that ends frees nothing while the node is over.
	putObject(ctx, t, s, src.gvr, src.object(n6, "", 1))
	waitMirrored(ctx, t, s, n6, is(1), 1)
	waitDevices(ctx, t, s, n6, 0, 0)
	stayBoundPending(ctx, t, s, ns, 5, 1, time.Second)
	list, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			if err := s.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	// Four claims left on a budget of 1: still nothing published, and
	// the waiting pod does not take the IP given back.
	stayBoundPending(ctx, t, s, ns, 4, 1, 2*time.Second)
	waitDevices(ctx, t, s, n6, 0, 0)
	putObject(ctx, t, s, src.gvr, src.object(n6, "", 6))
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, b, p, err := underlayUsage(ctx, s, ns)
		return err == nil && b == 5 && p == 0, nil
	})
	if err != nil {
		t.Fatalf("back to 6: %v", err)
	}
	watch.check(t, "node 6's claims within 5")
	deleteAll(ctx, t, s, ns)
	putObject(ctx, t, s, src.gvr, src.object(n6, "", 3))
}

// draDrawsAll: deploy/capacity-sources/draws-all.yaml's IP policy alone
// (DRA mode leaves out its routing one, as native mode does): eleven pods
// that ask for nothing, pinned to node 5 (10 IPs), get one IP each and
// keep default-scheduler, which binds ten of them, each with a claim.
func draDrawsAll(ctx context.Context, t *testing.T, s *stack.Stack) {
	const ns = "dra-draws"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Kubectl(ctx, "apply", "-f", stack.DeployFile("capacity-sources/draws-all.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"mutatingadmissionpolicybinding", "mutatingadmissionpolicy"} {
		if out, err := s.Kubectl(ctx, "delete", kind, "capscale-draws-all-scheduler"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(ns).Create(ctx, plainPod(ns, "probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, nil
		}
		_, ok := p.Spec.Containers[0].Resources.Limits[names.UnderlayIPResource]
		return ok && p.Spec.SchedulerName == corev1.DefaultSchedulerName, nil
	})
	if err != nil {
		t.Fatalf("the draws-all policy gives no IP on default-scheduler: %v", err)
	}
	n5 := plane.NodeName(5)
	var pods []*corev1.Pod
	for i := range 11 {
		p := plainPod(ns, fmt.Sprintf("plain-%d", i))
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n5}
		pods = append(pods, p)
	}
	createPods(ctx, t, s, pods...)
	stayBoundPending(ctx, t, s, ns, 10, 1, 2*time.Second)
	list, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Spec.SchedulerName != corev1.DefaultSchedulerName {
			t.Errorf("pod %s moved to scheduler %s", p.Name, p.Spec.SchedulerName)
		}
		if p.Spec.NodeName != "" && p.Status.ExtendedResourceClaimStatus == nil {
			t.Errorf("pod %s bound with no claim", p.Name)
		}
	}
	claimed, err := claimedPerNode(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if claimed[n5] != 10 {
		t.Errorf("node 5's claims hold %d devices, want 10", claimed[n5])
	}
	for _, kind := range []string{"mutatingadmissionpolicybinding", "mutatingadmissionpolicy"} {
		if out, err := s.Kubectl(ctx, "delete", kind, "capscale-draws-all-ip"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	deleteAll(ctx, t, s, ns)
}

// claimedPerNode counts, per node, the devices of capscale's driver that
// ResourceClaims hold.
func claimedPerNode(ctx context.Context, s *stack.Stack) (map[string]int, error) {
	claims, err := s.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for i := range claims.Items {
		for node, ds := range devices.Allocated(&claims.Items[i]) {
			out[node] += len(ds)
		}
	}
	return out, nil
}

// waitDevices waits until node's pool publishes want devices, allocated of
// them held by claims.
func waitDevices(ctx context.Context, t *testing.T, s *stack.Stack, node string, want, allocated int) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := s.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + devices.Driver + ",spec.pool.name=" + node})
		if err != nil {
			return false, nil
		}
		var published []string
		for _, sl := range list.Items {
			for _, d := range sl.Spec.Devices {
				published = append(published, d.Name)
			}
		}
		claims, err := s.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		held := 0
		for i := range claims.Items {
			for _, d := range devices.Allocated(&claims.Items[i])[node] {
				if slices.Contains(published, d) {
					held++
				}
			}
		}
		last = fmt.Sprintf("%d slices, devices %v, %d of them allocated", len(list.Items), published, held)
		return len(published) == want && held == allocated, nil
	})
	if err != nil {
		t.Fatalf("node %s: want %d devices, %d allocated; have %s: %v", node, want, allocated, last, err)
	}
}

// waitBoundCount waits until want pods of ns are bound.
func waitBoundCount(ctx context.Context, t *testing.T, s *stack.Stack, ns string, want int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		n := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		return n == want, nil
	})
	if err != nil {
		t.Fatalf("want %d pods of %s bound: %v", want, ns, err)
	}
}

// deleteAll deletes every pod of ns at once and waits until they and their
// claims are gone.
func deleteAll(ctx context.Context, t *testing.T, s *stack.Stack, ns string) {
	t.Helper()
	if err := s.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNoPodsNorClaims(ctx, t, s, ns)
}

// waitNoPodsNorClaims waits until ns has neither pods nor ResourceClaims.
func waitNoPodsNorClaims(ctx context.Context, t *testing.T, s *stack.Stack, ns string) {
	t.Helper()
	var pods, claims int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		c, err := s.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pods, claims = len(p.Items), len(c.Items)
		return pods == 0 && claims == 0, nil
	})
	if err != nil {
		t.Fatalf("namespace %s: %d pods and %d claims left: %v", ns, pods, claims, err)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, " | ")
	return l
}
