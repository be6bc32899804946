//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/underlay"
)

// otherScheduler is a second profile of the plane's stock kube-scheduler:
// a framework-based scheduler capscale does not extend.
const otherScheduler = "other-scheduler"

// failsafeStack starts m's stack laid out as a cluster with capscale
// installed beside its own scheduler: the plane's scheduler is the stock
// kube-scheduler with the profiles default-scheduler (native mode:
// deploy/native's, which counts the published IPs) and otherScheduler,
// and capscale-scheduler runs as its own process, one replica of deploy/'s
// Deployment for m (plugin: the capscale-scheduler binary; extender:
// kube-scheduler and its extender; native: kube-scheduler counting the
// published IPs), which the test can stop. A capacity source that draws
// all covers the two nodes. start starts (again) capscale-scheduler.
func failsafeStack(t *testing.T, m schedulingMode, po plane.Options) (s *stack.Stack, start func(ctx context.Context, name string) *stack.SchedulerReplica) {
	t.Helper()
	src := ownIPAM(t)
	base := "profiles:\n- schedulerName: default-scheduler\n"
	if m.name == "native" {
		b, err := os.ReadFile(stack.DeployFile("native/kube-scheduler-config.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		base = string(b)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(base), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["apiVersion"], cfg["kind"] = "kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"
	cfg["profiles"] = append(cfg["profiles"].([]any), map[string]any{"schedulerName": otherScheduler})
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := stack.Options{Plane: po}
	switch m.name {
	case "native":
		// The stack's extender publishes; kube-scheduler counts.
		file := filepath.Join(t.TempDir(), "kube-scheduler-config.yaml")
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		o.Native, o.SchedulerConfigFile = true, file
	default:
		o.Plane.SchedulerConfig = string(b)
	}
	o.CapacitySources = ownIPAMSource("all")
	o.Prepare = func(ctx context.Context, s *stack.Stack) error { return src.crd(ctx, s) }
	s = startStack(t, o)
	start = func(ctx context.Context, name string) *stack.SchedulerReplica {
		t.Helper()
		var r *stack.SchedulerReplica
		var err error
		switch m.name {
		case "plugin":
			r, err = s.StartPluginSchedulerReplica(ctx, name)
		case "extender":
			// As deploy/capacity-sources patches the Deployment.
			r, err = s.StartSchedulerReplicaWith(ctx, name, "--await-capacity-source")
		case "native":
			r, err = s.StartNativeSchedulerReplica(ctx, name)
		}
		if err != nil {
			t.Fatalf("starting %s: %v", name, err)
		}
		return r
	}
	return s, start
}

// TestPoliciesFailSafe (issue 55 §1, §2): in each mode, with
// deploy/capacity-sources/draws-all.yaml applied (deploy/'s draws-all
// policies: the IP and the move to capscale-scheduler):
//   - a pod in kube-system and one in capscale-system keep
//     default-scheduler and ask for no IP, and the stock kube-scheduler
//     places them; so does a pod of the system-cluster-critical class;
//   - a pod of another profile of the stock kube-scheduler gets neither
//     mutation and is placed (with an IP request, its NodeResourcesFit
//     fails every node where no Node advertises the resource);
//   - an app pod of an ordinary namespace gets both and is placed by
//     capscale-scheduler;
//   - with capscale-scheduler stopped, a kube-system pod still schedules,
//     an app pod waits, and binds once capscale-scheduler is back.
func TestPoliciesFailSafe(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		s, startCapscale := failsafeStack(t, m, plane.Options{Nodes: 2, Logf: t.Logf})
		ctx := testContext(t, 5*time.Minute)
		src := ownIPAM(t)
		n0, n1 := plane.NodeName(0), plane.NodeName(1)
		putObject(ctx, t, s, src.gvr, src.object(n0, "", 4))
		putObject(ctx, t, s, src.gvr, src.object(n1, "", 4))
		waitMirrored(ctx, t, s, n0, is(4), 4)
		waitMirrored(ctx, t, s, n1, is(4), 4)
		capscale := startCapscale(ctx, "capscale-scheduler-0")

		const apps = "apps"
		for _, ns := range []string{apps, "kube-system", stack.Namespace} {
			if err := s.WaitForNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Kubectl(ctx, "apply", "-f", stack.DeployFile("capacity-sources/draws-all.yaml")); err != nil {
			t.Fatal(err)
		}
		// kube-apiserver loads each policy on its own: wait for both.
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := s.Client.CoreV1().Pods(apps).Create(ctx, plainPod(apps, "probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil && underlay.PodNeed(p) == 1 && p.Spec.SchedulerName == "capscale-scheduler", nil
		}); err != nil {
			t.Fatalf("the draws-all policies do not act: %v", err)
		}

		critical := plainPod(apps, "critical")
		critical.Spec.PriorityClassName = "system-cluster-critical"
		other := plainPod(apps, "other")
		other.Spec.SchedulerName = otherScheduler
		for _, tc := range []struct {
			pod       *corev1.Pod
			scheduler string
			ip        int64
		}{
			{pod: plainPod("kube-system", "system"), scheduler: "default-scheduler"},
			{pod: plainPod(stack.Namespace, "own"), scheduler: "default-scheduler"},
			{pod: critical, scheduler: "default-scheduler"},
			{pod: other, scheduler: otherScheduler},
			{pod: plainPod(apps, "app"), scheduler: "capscale-scheduler", ip: 1},
		} {
			got := createPod(ctx, t, s, tc.pod)
			if got.Spec.SchedulerName != tc.scheduler || underlay.PodNeed(got) != tc.ip {
				t.Errorf("%s mode: %s/%s admitted with scheduler %q and %d IPs, want %q and %d",
					m.name, got.Namespace, got.Name, got.Spec.SchedulerName, underlay.PodNeed(got), tc.scheduler, tc.ip)
			}
		}
		for _, p := range []struct{ ns, name string }{{"kube-system", "system"}, {stack.Namespace, "own"}, {apps, "critical"}, {apps, "other"}, {apps, "app"}} {
			waitNodeName(ctx, t, s, p.ns, p.name)
		}

		// capscale-scheduler lost: the cluster's own pods still schedule,
		// an app pod waits for it.
		capscale.Scheduler.Stop(5 * time.Second)
		if capscale.Extender != nil {
			capscale.Extender.Stop(5 * time.Second)
		}
		createPod(ctx, t, s, plainPod("kube-system", "system-2"))
		createPod(ctx, t, s, plainPod(apps, "app-2"))
		waitNodeName(ctx, t, s, "kube-system", "system-2")
		time.Sleep(3 * time.Second)
		if p, err := s.Client.CoreV1().Pods(apps).Get(ctx, "app-2", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Fatalf("%s mode: app-2 with capscale-scheduler down: %v, node %q; want it waiting", m.name, err, p.Spec.NodeName)
		}
		start := time.Now()
		startCapscale(ctx, "capscale-scheduler-1")
		waitPodWithin(ctx, t, s, apps, "app-2", "bound by capscale-scheduler back", 90*time.Second, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
		t.Logf("%s mode: app-2 bound %s after capscale-scheduler started again", m.name, time.Since(start).Round(time.Millisecond))
	})
}

// createPod creates p and returns it as admitted.
func createPod(ctx context.Context, t *testing.T, s *stack.Stack, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := s.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s/%s: %v", p.Namespace, p.Name, err)
	}
	return got
}
