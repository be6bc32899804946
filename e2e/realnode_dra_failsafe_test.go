//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/nodeimage"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/extender/devices"
	"github.com/capscale/capscale/internal/names"
)

// draFailsafeCapacity is the real node's underlay budget here (its
// annotation): its CNI range (10) also holds capscale's own pods and the
// kube-system pod, which ask for no underlay IP.
const draFailsafeCapacity = 3

// pluginDS is the chart's kubelet plugin DaemonSet.
const pluginDS = "capscale-dra-kubelet-plugin"

// TestRealNodeDRAPluginFailSafe is issue 55 §1 for DRA mode's kubelet
// plugin, on one real node, with the chart as an operator installs it
// (`helm install oci://…`, extender.mode=dra): the chart's DaemonSet runs
// `extender kubelet-plugin` as a pod on the host's network (issue 56: it
// had never run as a pod on a real node), Ready once the kubelet
// registered it, and the extender publishes the node's free devices only
// while it is Ready (--kubelet-plugin-selector). One real node: a second
// one on this host would have another kubelet root dir and share the
// plugin's host port. In sequence, each step timed:
//   - plugin-ready: the plugin pod Ready, a pod with an IP Running;
//   - plugin-gone: the DaemonSet's nodeSelector matches nothing: the running
//     pod stays Running; a new pod with an IP stays Pending with
//     kube-scheduler's reason and is never bound, polled until the kubelet
//     has wiped the driver's slice (30 s after the plugin left) and the
//     publisher has written it again, and a little beyond; a kube-system
//     pod without an IP schedules and runs; capscale_extender_unserved_nodes
//     is 1;
//   - plugin-back: the nodeSelector removed: the waiting pod binds and runs,
//     timed from the plugin pod's Ready.
//
// Without the gate (templates/scheduler.yaml's --kubelet-plugin-selector
// and --kubelet-plugin-namespace removed in the worktree while the test
// pushed the chart) plugin-gone failed: "waiting bound to real-node-0 2.0s
// after the plugin left", its kubelet saying FailedPrepareDynamicResources
// "DRA driver ip.capscale.io is not registered".
func TestRealNodeDRAPluginFailSafe(t *testing.T) {
	ctx := testContext(t, 20*time.Minute)
	work := t.TempDir()
	reg := startRegistry(ctx, t, work)
	version := fmt.Sprintf("v0.0.0-e2e.%d", time.Now().Unix())
	makeImage(ctx, t, filepath.Join(work, version), reg, version)
	if got := pushChart(ctx, t, filepath.Join(work, version), reg, version); got != reg+"/capscale:"+version {
		t.Fatalf("the chart %s names the image %s", version, got)
	}
	kubeVersion, _ := planeKubernetes(ctx, t)
	port, err := plane.FreePort()
	if err != nil {
		t.Fatal(err)
	}

	p := startPlane(t, plane.Options{
		Nodes: -1, RealNodes: 1, RealNodeRegistries: []string{reg},
		RealNodeImages: []nodeimage.Image{kubeSchedulerImage(t, work, kubeVersion)}, ServiceNetwork: true,
	})
	t.Cleanup(func() {
		if err := p.StopRealNodes(); err != nil {
			t.Errorf("real nodes' cleanup: %v", err)
		}
	})
	s := &stack.Stack{Plane: p}
	node := p.RealNodes[0]
	patchNode(ctx, t, p, node.Name, map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{names.UnderlayIPCapacityAnnotation: fmt.Sprint(draFailsafeCapacity)}}})
	api, err := url.Parse(p.APIServerURL)
	if err != nil {
		t.Fatal(err)
	}
	// On the host's network the plugin cannot use the Service kubernetes
	// here: the plane sends its ClusterIP to the apiserver only from the
	// bridges (e2e/plane/realnode_services.go). The chart's extraEnv points
	// it at the apiserver's own address, as on a cluster whose kube-proxy
	// replacement does not serve the host.
	values := filepath.Join(work, "values.yaml")
	if err := os.WriteFile(values, fmt.Appendf(nil, `extender:
  mode: dra
  replicas: 1
  kubeletPlugin:
    kubeletDir: %s
    healthPort: %d
    extraEnv:
    - {name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}
    - {name: KUBERNETES_SERVICE_PORT, value: "%s"}
metricsAdapter:
  replicas: 1
workloadAPI:
  enabled: false
controller:
  enabled: false
`, filepath.Join(node.Dir, "kubelet"), port, api.Port()), 0o644); err != nil {
		t.Fatal(err)
	}
	helm := helmCommand(ctx, t, p)
	start := time.Now()
	if out, err := helm("install", "capscale", "oci://"+reg+"/charts/capscale", "--version", strings.TrimPrefix(version, "v"),
		"--plain-http", "--create-namespace", "-f", values, "--wait", "--timeout", helmWait); err != nil {
		t.Fatalf("helm install: %v\n%s\n%s", err, out, namespaceState(ctx, p, stack.Namespace))
	}
	t.Logf("helm install --wait (the plugin pod Ready among the rest) %.1fs", time.Since(start).Seconds())

	const apps = "apps"
	if err := p.WaitForNamespace(ctx, apps); err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"plugin-ready", func(t *testing.T) {
			plugin := waitPluginPod(ctx, t, s, node.Name)
			if !plugin.Spec.HostNetwork || plugin.Status.PodIP != plugin.Status.HostIP {
				t.Errorf("plugin pod %s: hostNetwork %v, IP %s on host %s; want the host's network", plugin.Name, plugin.Spec.HostNetwork, plugin.Status.PodIP, plugin.Status.HostIP)
			}
			begin := time.Now()
			createPod(ctx, t, s, realPod(apps, "before", 1))
			waitRunningOn(ctx, t, s, apps, "before", node.Name, 2*time.Minute)
			running = getPod(ctx, t, s, apps, "before")
			t.Logf("a pod with an IP Running %.1fs after its creation", time.Since(begin).Seconds())
			waitUnserved(ctx, t, s, 0)
		}},
		{"plugin-gone", func(t *testing.T) {
			gone := time.Now()
			patchPluginNodeSelector(ctx, t, s, map[string]any{"e2e.capscale.io/no-plugin": "true"})
			waitNoPluginPod(ctx, t, s)
			t.Logf("plugin pod gone %.1fs after the nodeSelector patch", time.Since(gone).Seconds())
			// The publisher held the node back as soon as the pod was being
			// deleted, before it left the API: the pods come after.
			slice := waitPoolSlice(ctx, t, s, node.Name)
			createPod(ctx, t, s, realPod(apps, "waiting", 1))
			createPod(ctx, t, s, realPod(metav1.NamespaceSystem, "system-no-plugin", 0))
			// Never bound, through the kubelet's wipe of the driver's slice
			// and the publisher's rewrite (a new slice UID), and 5 s past it.
			var rewritten time.Time
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				q := getPod(ctx, t, s, apps, "waiting")
				if q.Spec.NodeName != "" {
					return false, fmt.Errorf("waiting bound to %s %.1fs after the plugin left", q.Spec.NodeName, time.Since(gone).Seconds())
				}
				if rewritten.IsZero() {
					if uid, _ := poolState(ctx, s, node.Name); uid != "" && uid != slice {
						rewritten = time.Now()
						t.Logf("the kubelet wiped the driver's slice and the publisher wrote it again, %.1fs after the plugin left", rewritten.Sub(gone).Seconds())
					}
					return false, nil
				}
				return time.Since(rewritten) > 5*time.Second, nil
			})
			if err != nil {
				t.Fatalf("the waiting pod: %v\n%s", err, namespaceState(ctx, p, apps))
			}
			waitRunningOn(ctx, t, s, metav1.NamespaceSystem, "system-no-plugin", node.Name, 2*time.Minute)
			checkPendingReason(ctx, t, s, apps, []string{"waiting"}, realExhausted["dra"])
			waitFreeDevices(ctx, t, s, node.Name, 0)
			waitUnserved(ctx, t, s, 1)
			if q := getPod(ctx, t, s, apps, "before"); q.UID != running.UID || q.Status.Phase != corev1.PodRunning || restarts(q) > 0 {
				t.Errorf("the running pod: %s, uid %s (was %s), %d restarts; want it Running as before", q.Status.Phase, q.UID, running.UID, restarts(q))
			}
			t.Logf("waiting stayed unbound for %.1fs without the plugin", time.Since(gone).Seconds())
			// What docs/dra.md shows an operator: the DaemonSet with no pod
			// on the node, the pod's reason.
			out, err := p.Kubectl(ctx, "-n", stack.Namespace, "get", "ds", pluginDS)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kubectl -n %s get ds %s:\n%s", stack.Namespace, pluginDS, out)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if f := strings.Fields(lines[len(lines)-1]); len(lines) != 2 || len(f) < 4 || f[1] != "0" || f[3] != "0" {
				t.Errorf("the DaemonSet with its nodeSelector matching nothing: %q, want DESIRED and READY 0", out)
			}
		}},
		{"plugin-back", func(t *testing.T) {
			patchPluginNodeSelector(ctx, t, s, nil)
			back := time.Now()
			waitPluginPod(ctx, t, s, node.Name)
			ready := time.Now()
			t.Logf("the plugin pod Ready %.1fs after the nodeSelector was removed", ready.Sub(back).Seconds())
			waitRunningOn(ctx, t, s, apps, "waiting", node.Name, 3*time.Minute)
			t.Logf("waiting Running %.1fs after the plugin pod was seen Ready", time.Since(ready).Seconds())
			waitUnserved(ctx, t, s, 0)
			if q := getPod(ctx, t, s, apps, "before"); q.UID != running.UID || q.Status.Phase != corev1.PodRunning || restarts(q) > 0 {
				t.Errorf("the running pod: %s, %d restarts; want it Running throughout", q.Status.Phase, restarts(q))
			}
		}},
	}
	for _, st := range steps {
		begin := time.Now()
		if !t.Run(st.name, st.run) {
			t.Fatalf("%s failed: the later steps need what it leaves\n%s", st.name, namespaceState(ctx, p, stack.Namespace))
		}
		t.Logf("%s: %.1fs", st.name, time.Since(begin).Seconds())
	}
}

// patchPluginNodeSelector sets the plugin DaemonSet's pod nodeSelector
// (nil removes it).
func patchPluginNodeSelector(ctx context.Context, t *testing.T, s *stack.Stack, sel map[string]any) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"nodeSelector": sel}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.AppsV1().DaemonSets(stack.Namespace).Patch(ctx, pluginDS, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching %s's nodeSelector: %v", pluginDS, err)
	}
}

// waitPluginPod waits until a plugin pod on node serves it (Running and
// Ready, devices.Serving) and returns it.
func waitPluginPod(ctx context.Context, t *testing.T, s *stack.Stack, node string) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(stack.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + pluginDS})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			q := &pods.Items[i]
			if q.Spec.NodeName == node && q.DeletionTimestamp == nil && devices.Serving(q) {
				got = q
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no Ready plugin pod on %s: %v\n%s", node, err, namespaceState(ctx, s.Plane, stack.Namespace))
	}
	return got
}

// waitNoPluginPod waits until no plugin pod is left.
func waitNoPluginPod(ctx context.Context, t *testing.T, s *stack.Stack) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(stack.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + pluginDS})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("the plugin pod still there: %v", err)
	}
}

// poolState is the UID of node's first slice of the driver ("" if none)
// and how many devices the pool publishes beyond what claims hold.
func poolState(ctx context.Context, s *stack.Stack, node string) (types.UID, int) {
	list, err := s.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + devices.Driver + ",spec.nodeName=" + node})
	if err != nil {
		return "", -1
	}
	claims, err := s.Client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", -1
	}
	held := map[string]bool{}
	for i := range claims.Items {
		for _, d := range devices.Allocated(&claims.Items[i])[node] {
			held[d] = true
		}
	}
	var uid types.UID
	free := 0
	for _, sl := range list.Items {
		if sl.Name == devices.SliceName(node, 0) {
			uid = sl.UID
		}
		for _, d := range sl.Spec.Devices {
			if !held[d.Name] {
				free++
			}
		}
	}
	return uid, free
}

// waitFreeDevices waits until node's pool publishes want free devices.
func waitFreeDevices(ctx context.Context, t *testing.T, s *stack.Stack, node string, want int) {
	t.Helper()
	var uid types.UID
	var free int
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		uid, free = poolState(ctx, s, node)
		return uid != "" && free == want, nil
	})
	if err != nil {
		t.Fatalf("%s's pool publishes %d free devices, want %d: %v", node, free, want, err)
	}
}

// waitPoolSlice waits until node's pool has its first slice and returns
// its UID.
func waitPoolSlice(ctx context.Context, t *testing.T, s *stack.Stack, node string) types.UID {
	t.Helper()
	var uid types.UID
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		uid, _ = poolState(ctx, s, node)
		return uid != "", nil
	})
	if err != nil {
		t.Fatalf("no slice of %s's pool: %v", node, err)
	}
	return uid
}

// waitUnserved waits until the extender's capscale_extender_unserved_nodes
// is want (the one capscale-scheduler pod publishes).
func waitUnserved(ctx context.Context, t *testing.T, s *stack.Stack, want float64) {
	t.Helper()
	var got float64
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(stack.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=capscale-scheduler"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.PodIP == "" {
			return false, nil
		}
		got = metricSum(ctx, t, "http://"+pods.Items[0].Status.PodIP+":8889", "capscale_extender_unserved_nodes")
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("capscale_extender_unserved_nodes %v, want %v: %v", got, want, err)
	}
}

func restarts(q *corev1.Pod) int32 {
	var n int32
	for _, c := range q.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}
