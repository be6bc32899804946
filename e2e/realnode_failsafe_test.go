//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// failsafeSlice is each real node's whereabouts slice here (a /27): the
// system node holds capscale's pods, their replacements while the old ones
// terminate, and the test's kube-system pods.
const failsafeSlice = 30

// replacementLimit bounds the wait for a deleted component's replacements
// to run: a bound for pods that never run, not a speed.
const replacementLimit = 60 * time.Second

// TestRealNodeFailSafe is issue 55 §1 on real nodes, with the chart as an
// operator installs it (`helm install oci://…`, plugin mode) and the
// capacity source on whereabouts' NodeSlicePool, which draws all: every pod
// of every namespace the policies do not leave alone gets an underlay IP
// and capscale-scheduler. The real nodes' whereabouts hands out every pod's
// IP, capscale's own included; the system node takes capscale's pods, the
// underlay node (tainted) the app pods. One install, in sequence:
//   - scheduler-deleted: both capscale-scheduler pods deleted; their
//     replacements (default-scheduler, no IP asked) run, and an app pod
//     binds through them;
//   - scheduler-at-zero: capscale-scheduler at 0 replicas; a kube-system pod
//     schedules and runs, an app pod stays unbound, with no scheduler of
//     its own to say why, and binds once capscale-scheduler is back;
//   - controller-deleted: both capscale-controller pods deleted; their
//     replacements run;
//   - controller-at-zero: capscale-controller at 0 replicas and the
//     underlay node as the mirror has never read it (its annotations
//     removed, as a node that joins meanwhile has none); a kube-system pod
//     schedules and runs, and an app pod binds and runs all the same:
//     capscale-scheduler reads whereabouts' slices itself (the chart's
//     default, schedulerReads: auto), and the mirror is back once the
//     controller is;
//   - mirror-only: `helm upgrade --reuse-values --set
//     controller.capacitySources.schedulerReads=false`; the scheduler's
//     pods roll to the mirror's path;
//   - controller-at-zero-mirror: controller-at-zero again, now with the
//     scheduler following the mirror: a kube-system pod schedules and
//     runs, an app pod waits with capscale's reason (underlay.NotReadYet),
//     and binds once the controller is back;
//   - native-publisher-reads: `helm upgrade --reuse-values --set
//     extender.mode=native`; by the chart's default (publisherReads: auto)
//     the extender reads the sources and the controller is given none;
//     with capscale-controller at 0 and the node's mirror annotations
//     removed, the publisher writes them back and an app pod binds and runs.
//
// Each exclusion of the policies (_helpers.tpl capscale.admissionNamespaces
// and capscale.admissionPriority) was reverted in a scratch copy of the
// chart, and its step failed: without capscale's namespace and the system-*
// classes, scheduler-deleted ("2 replacements of capscale-scheduler not
// Running within 1m0s; they are [... (scheduler capscale-scheduler, node
// "", Pending, 1 IPs) ...]": nothing binds them); without kube-system,
// scheduler-at-zero ("kube-system/system-no-scheduler admitted with
// scheduler "capscale-scheduler" and 1 IPs"); without capscale's namespace
// alone, controller-deleted (its replacements Pending on capscale-scheduler,
// which finds no node with an IP for them: the system node's is 0).
func TestRealNodeFailSafe(t *testing.T) {
	ctx := testContext(t, 30*time.Minute)
	work := t.TempDir()
	reg := startRegistry(ctx, t, work)
	version := fmt.Sprintf("v0.0.0-e2e.%d", time.Now().Unix())
	makeImage(ctx, t, filepath.Join(work, version), reg, version)
	if got := pushChart(ctx, t, filepath.Join(work, version), reg, version); got != reg+"/capscale:"+version {
		t.Fatalf("the chart %s names the image %s", version, got)
	}

	// The last step runs native mode, whose scheduler pod runs the stock
	// kube-scheduler image the chart names: the plane's, imported.
	kubeVersion, _ := planeKubernetes(ctx, t)
	p := startPlane(t, plane.Options{
		Nodes: -1, RealNodes: 2, IPAM: plane.IPAMWhereabouts, RealNodeCapacity: failsafeSlice,
		RealNodeRegistries: []string{reg}, ServiceNetwork: true,
		RealNodeImages: []nodeimage.Image{kubeSchedulerImage(t, work, kubeVersion)},
	})
	t.Cleanup(func() {
		if err := p.StopRealNodes(); err != nil {
			t.Errorf("real nodes' cleanup: %v", err)
		}
	})
	s := &stack.Stack{Plane: p}
	system, pool := p.RealNodes[0].Name, p.RealNodes[1].Name
	patchNode(ctx, t, p, system, map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{names.UnderlayIPCapacityAnnotation: "0"}}})
	patchNode(ctx, t, p, pool, map[string]any{"spec": map[string]any{
		"taints": []corev1.Taint{{Key: underlayPoolTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}})

	values := filepath.Join(work, "values.yaml")
	if err := os.WriteFile(values, []byte(`extender:
  mode: plugin
metricsAdapter:
  replicas: 1
workloadAPI:
  replicas: 1
controller:
  capacitySources:
    enabled: true
    sources:
    - name: whereabouts
      preset: whereabouts-node-slice
`), 0o644); err != nil {
		t.Fatal(err)
	}
	helm := helmCommand(ctx, t, p)
	start := time.Now()
	if out, err := helm("install", "capscale", "oci://"+reg+"/charts/capscale", "--version", strings.TrimPrefix(version, "v"),
		"--plain-http", "--create-namespace", "-f", values, "--wait", "--timeout", helmWait); err != nil {
		t.Fatalf("helm install: %v\n%s\n%s", err, out, namespaceState(ctx, p, "capscale-system"))
	}
	t.Logf("helm install --wait %.1fs", time.Since(start).Seconds())
	waitMirrored(ctx, t, s, pool, is(failsafeSlice), 0)

	const apps = "apps"
	if err := p.WaitForNamespace(ctx, apps); err != nil {
		t.Fatal(err)
	}
	// An app pod as a user writes it: no IP, no scheduler; the draws-all
	// policies give it both.
	appPod := func(name string) *corev1.Pod {
		q := realPod(apps, name, 0)
		q.Spec.Tolerations = []corev1.Toleration{{Key: underlayPoolTaint, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		return q
	}
	systemPod := func(name string) *corev1.Pod { return realPod(metav1.NamespaceSystem, name, 0) }

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"scheduler-deleted", func(t *testing.T) {
			replaceAll(ctx, t, s, "capscale-scheduler")
			createAdmitted(ctx, t, s, appPod("app-after-scheduler"), "capscale-scheduler", 1)
			waitRunningOn(ctx, t, s, apps, "app-after-scheduler", pool, 2*time.Minute)
		}},
		{"scheduler-at-zero", func(t *testing.T) {
			scaleToZero(ctx, t, s, "capscale-scheduler")
			createAdmitted(ctx, t, s, appPod("app-no-scheduler"), "capscale-scheduler", 1)
			createAdmitted(ctx, t, s, systemPod("system-no-scheduler"), "default-scheduler", 0)
			waitRunningOn(ctx, t, s, metav1.NamespaceSystem, "system-no-scheduler", system, 2*time.Minute)
			// The kube-system pod ran meanwhile: the app pod had as long.
			q := getPod(ctx, t, s, apps, "app-no-scheduler")
			if q.Spec.NodeName != "" || podScheduledSet(q) {
				t.Fatalf("app-no-scheduler with capscale-scheduler at 0: node %q, conditions %v; want it unbound, no scheduler having seen it", q.Spec.NodeName, q.Status.Conditions)
			}
			back := time.Now()
			scaleDeployment(ctx, t, s, stack.Namespace, "capscale-scheduler", 2)
			waitRunningOn(ctx, t, s, apps, "app-no-scheduler", pool, 3*time.Minute)
			t.Logf("app-no-scheduler Running on %s %.1fs after capscale-scheduler was scaled back to 2", pool, time.Since(back).Seconds())
			waitDeploymentReady(ctx, t, p, "capscale-scheduler", 2)
		}},
		{"controller-deleted", func(t *testing.T) {
			replaceAll(ctx, t, s, "capscale-controller")
		}},
		{"controller-at-zero", func(t *testing.T) {
			scaleToZero(ctx, t, s, "capscale-controller")
			unmirror(ctx, t, p, pool)
			createAdmitted(ctx, t, s, systemPod("system-no-controller"), "default-scheduler", 0)
			waitRunningOn(ctx, t, s, metav1.NamespaceSystem, "system-no-controller", system, 2*time.Minute)
			// capscale-scheduler reads the node's slice itself: the
			// mirror's absence does not hold the pod.
			created := time.Now()
			createAdmitted(ctx, t, s, appPod("app-no-controller"), "capscale-scheduler", 1)
			waitRunningOn(ctx, t, s, apps, "app-no-controller", pool, 2*time.Minute)
			t.Logf("app-no-controller Running on %s %.1fs after its create, capscale-controller at 0", pool, time.Since(created).Seconds())
			if n, err := p.Client.CoreV1().Nodes().Get(ctx, pool, metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			} else if v, ok := n.Annotations[names.UnderlayIPSourceCapacityAnnotation]; ok {
				t.Fatalf("%s carries the mirror's capacity %q with capscale-controller at 0: the step proves nothing", pool, v)
			}
			scaleDeployment(ctx, t, s, stack.Namespace, "capscale-controller", 2)
			waitMirrored(ctx, t, s, pool, is(failsafeSlice), 0)
			waitDeploymentReady(ctx, t, p, "capscale-controller", 2)
		}},
		{"mirror-only", func(t *testing.T) {
			if out, err := helm("upgrade", "capscale", "oci://"+reg+"/charts/capscale", "--version", strings.TrimPrefix(version, "v"),
				"--plain-http", "--reuse-values", "--set", "controller.capacitySources.schedulerReads=false", "--wait", "--timeout", helmWait); err != nil {
				t.Fatalf("helm upgrade: %v\n%s\n%s", err, out, namespaceState(ctx, p, stack.Namespace))
			}
			waitDeploymentReady(ctx, t, p, "capscale-scheduler", 2)
			waitDeploymentReady(ctx, t, p, "capscale-controller", 2)
		}},
		{"controller-at-zero-mirror", func(t *testing.T) {
			scaleToZero(ctx, t, s, "capscale-controller")
			unmirror(ctx, t, p, pool)
			// The kube-system pod first: by the time it runs,
			// capscale-scheduler's informer has long seen the node unread
			// (an app pod created with the patch could meet its cache
			// still mirrored).
			createAdmitted(ctx, t, s, systemPod("system-mirror-no-controller"), "default-scheduler", 0)
			waitRunningOn(ctx, t, s, metav1.NamespaceSystem, "system-mirror-no-controller", system, 2*time.Minute)
			createAdmitted(ctx, t, s, appPod("app-unread"), "capscale-scheduler", 1)
			checkPendingReason(ctx, t, s, apps, []string{"app-unread"}, underlay.NotReadYet)
			back := time.Now()
			scaleDeployment(ctx, t, s, stack.Namespace, "capscale-controller", 2)
			waitRunningOn(ctx, t, s, apps, "app-unread", pool, 3*time.Minute)
			t.Logf("app-unread Running on %s %.1fs after capscale-controller was scaled back to 2", pool, time.Since(back).Seconds())
			waitMirrored(ctx, t, s, pool, is(failsafeSlice), 0)
			waitDeploymentReady(ctx, t, p, "capscale-controller", 2)
		}},
		{"native-publisher-reads", func(t *testing.T) {
			if out, err := helm("upgrade", "capscale", "oci://"+reg+"/charts/capscale", "--version", strings.TrimPrefix(version, "v"),
				"--plain-http", "--reuse-values", "--set", "extender.mode=native", "--wait", "--timeout", helmWait); err != nil {
				t.Fatalf("helm upgrade: %v\n%s\n%s", err, out, namespaceState(ctx, p, stack.Namespace))
			}
			waitDeploymentReady(ctx, t, p, "capscale-scheduler", 2)
			// publisherReads' default: the extender reads the sources,
			// the controller is given none.
			if args := deploymentArgs(ctx, t, p, "capscale-scheduler", "extender"); !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--capacity-sources=") }) {
				t.Fatalf("native mode's extender runs without --capacity-sources: %v", args)
			}
			if args := deploymentArgs(ctx, t, p, "capscale-controller", "controller"); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--capacity-sources") }) {
				t.Fatalf("capscale-controller still mirrors in native mode: %v", args)
			}
			scaleToZero(ctx, t, s, "capscale-controller")
			unmirror(ctx, t, p, pool)
			// The publisher writes the mirror's annotations back, with
			// no controller running.
			waitMirrored(ctx, t, s, pool, is(failsafeSlice), 0)
			created := time.Now()
			createAdmitted(ctx, t, s, appPod("app-native"), "capscale-scheduler", 1)
			waitRunningOn(ctx, t, s, apps, "app-native", pool, 2*time.Minute)
			t.Logf("app-native Running on %s %.1fs after its create, native mode, capscale-controller at 0", pool, time.Since(created).Seconds())
			scaleDeployment(ctx, t, s, stack.Namespace, "capscale-controller", 2)
			waitDeploymentReady(ctx, t, p, "capscale-controller", 2)
		}},
	}
	for _, st := range steps {
		begin := time.Now()
		if !t.Run(st.name, st.run) {
			t.Fatalf("%s failed: the later steps need what it restores\n%s", st.name, namespaceState(ctx, p, stack.Namespace))
		}
		t.Logf("%s: %.1fs", st.name, time.Since(begin).Seconds())
	}
}

// replaceAll deletes every pod of the chart's Deployment name and waits
// until as many others run, each placed by default-scheduler and asking
// for no underlay IP, then until the Deployment is ready again.
func replaceAll(ctx context.Context, t *testing.T, s *stack.Stack, name string) {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name}
	old, err := s.Client.CoreV1().Pods(stack.Namespace).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(old.Items) == 0 {
		t.Fatalf("no pod of %s to delete", name)
	}
	var gone []types.UID
	for _, q := range old.Items {
		gone = append(gone, q.UID)
		if err := s.Client.CoreV1().Pods(stack.Namespace).Delete(ctx, q.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var last []string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, replacementLimit, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(stack.Namespace).List(ctx, sel)
		if err != nil {
			return false, nil
		}
		running := 0
		last = last[:0]
		for _, q := range pods.Items {
			if slices.Contains(gone, q.UID) {
				continue
			}
			last = append(last, fmt.Sprintf("%s (scheduler %s, node %q, %s, %d IPs)", q.Name, q.Spec.SchedulerName, q.Spec.NodeName, q.Status.Phase, underlay.PodNeed(&q)))
			if q.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == len(gone), nil
	})
	if err != nil {
		t.Fatalf("%d replacements of %s not Running within %s: %v; they are %v", len(gone), name, replacementLimit, err, last)
	}
	t.Logf("%d replacements of %s Running %.1fs after the delete: %v", len(gone), name, time.Since(start).Seconds(), last)
	for _, l := range last {
		if !strings.Contains(l, "scheduler default-scheduler,") || !strings.HasSuffix(l, ", 0 IPs)") {
			t.Errorf("replacement %s: want default-scheduler and no underlay IP", l)
		}
	}
	waitDeploymentReady(ctx, t, s.Plane, name, int32(len(gone)))
}

// createAdmitted creates q and checks what the policies made of it.
func createAdmitted(ctx context.Context, t *testing.T, s *stack.Stack, q *corev1.Pod, scheduler string, ips int64) {
	t.Helper()
	got := createPod(ctx, t, s, q)
	if got.Spec.SchedulerName != scheduler || underlay.PodNeed(got) != ips {
		t.Fatalf("%s/%s admitted with scheduler %q and %d IPs, want %q and %d",
			got.Namespace, got.Name, got.Spec.SchedulerName, underlay.PodNeed(got), scheduler, ips)
	}
}

func getPod(ctx context.Context, t *testing.T, s *stack.Stack, ns, name string) *corev1.Pod {
	t.Helper()
	q, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// podScheduledSet: some scheduler has written the pod's PodScheduled.
func podScheduledSet(q *corev1.Pod) bool {
	return slices.ContainsFunc(q.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled })
}

// waitRunningOn waits until the pod runs on node.
func waitRunningOn(ctx context.Context, t *testing.T, s *stack.Stack, ns, name, node string, timeout time.Duration) {
	t.Helper()
	var q *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if q, err = s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		return q.Spec.NodeName == node && q.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		state := "not found"
		if q != nil {
			state = fmt.Sprintf("node %q, %s, conditions %v", q.Spec.NodeName, q.Status.Phase, q.Status.Conditions)
		}
		t.Fatalf("%s/%s not Running on %s within %s: %v; %s", ns, name, node, timeout, err, state)
	}
}

// scaleToZero scales capscale's Deployment name to 0 and waits until none
// of its pods is left.
func scaleToZero(ctx context.Context, t *testing.T, s *stack.Stack, name string) {
	t.Helper()
	scaleDeployment(ctx, t, s, stack.Namespace, name, 0)
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(stack.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		return err == nil && len(pods.Items) == 0, nil
	}); err != nil {
		t.Fatalf("%s's pods still there at 0 replicas: %v", name, err)
	}
}

// waitDeploymentReady waits until replicas pods of capscale's Deployment
// name are ready and no other is left.
func waitDeploymentReady(ctx context.Context, t *testing.T, p *plane.Plane, name string, replicas int32) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := p.Client.AppsV1().Deployments(stack.Namespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == replicas && d.Status.Replicas == replicas && d.Status.UpdatedReplicas == replicas, nil
	}); err != nil {
		t.Fatalf("%s not back to %d ready replicas: %v\n%s", name, replicas, err, namespaceState(ctx, p, stack.Namespace))
	}
}

// unmirror removes what the mirror wrote on node: the node is then as one
// that joined while capscale-controller was away, which the mirror has not
// read.
func unmirror(ctx context.Context, t *testing.T, p *plane.Plane, node string) {
	t.Helper()
	annotations := map[string]any{}
	for _, a := range []string{names.UnderlayIPSourceCapacityAnnotation, names.UnderlayIPSourceAnnotation,
		names.UnderlayIPSourceMaxCapacityAnnotation, names.UnderlayIPSourceUsedAnnotation} {
		annotations[a] = nil
	}
	patchNode(ctx, t, p, node, map[string]any{"metadata": map[string]any{"annotations": annotations}})
}

// deploymentArgs is the command of container in the chart's Deployment name.
func deploymentArgs(ctx context.Context, t *testing.T, p *plane.Plane, name, container string) []string {
	t.Helper()
	d, err := p.Client.AppsV1().Deployments(stack.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == container {
			return append(slices.Clone(c.Command), c.Args...)
		}
	}
	t.Fatalf("Deployment %s has no container %s", name, container)
	return nil
}
