//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/ipreport"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestUnderlayPodPolicy: deploy/admission's MutatingAdmissionPolicies on
// the real kube-apiserver, in plugin mode (capscale-scheduler). A
// Deployment with no capscale field in a namespace labelled
// capscale.io/underlay=true gets one IP per pod and capscale-scheduler, and
// the rule places it: 4 IPs on two nodes, 5 replicas, exactly 4 bound. A
// hostNetwork pod there, a pod in an unmarked namespace, an explicit value
// and another scheduler's pod (no IP, its scheduler kept) are left as they
// are.
func TestUnderlayPodPolicy(t *testing.T) {
	s := startPluginStack(t, 2, func(int) string { return "2" })
	ctx := testContext(t, 4*time.Minute)
	for _, f := range []string{"admission/underlay-ip.yaml", "admission/scheduler-name.yaml"} {
		if _, err := s.Kubectl(ctx, "apply", "-f", stack.DeployFile(f)); err != nil {
			t.Fatal(err)
		}
	}
	const marked, plain = "underlay-apps", "plain-apps"
	for _, ns := range []string{marked, plain} {
		if err := s.WaitForNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	// A pod created before the namespace is marked: no request, so it
	// holds an IP nobody counts, which kubectl capscale ips must say.
	createPods(ctx, t, s, plainPod(marked, "before-policy"))
	if _, err := s.Kubectl(ctx, "label", "namespace", marked, names.UnderlayNamespaceLabel+"=true"); err != nil {
		t.Fatal(err)
	}
	// The policy takes effect once kube-apiserver's policy informer has it:
	// dry-run creates until a pod comes back mutated.
	probe := plainPod(marked, "probe")
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(marked).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && underlay.PodNeed(p) == 1 && p.Spec.SchedulerName == "capscale-scheduler", nil
	}); err != nil {
		t.Fatalf("the policies never mutated a pod: %v", err)
	}

	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: marked, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](5),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{{Name: "app", Image: "registry.example/web:1"}, {Name: "sidecar", Image: "registry.example/proxy:1"}},
					TerminationGracePeriodSeconds: new(int64),
				},
			},
		},
	}
	if _, err := s.Client.AppsV1().Deployments(marked).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	capacity := map[string]int{plane.NodeName(0): 2, plane.NodeName(1): 2}
	// 4 of web bound, one waiting, and before-policy bound (holding no
	// counted IP).
	waitUnderlay(ctx, t, s, marked, capacity, 5, 1)
	assertNeverOver(ctx, t, s, marked, capacity, 2*time.Second)
	pods, err := s.Client.CoreV1().Pods(marked).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		app := p.Spec.Containers[0].Resources
		if q := app.Requests[underlay.Resource]; q.Value() != 1 {
			t.Errorf("%s: first container requests %v, want 1 IP", p.Name, app.Requests)
		}
		if q := app.Limits[underlay.Resource]; q.Value() != 1 {
			t.Errorf("%s: first container limits %v, want 1 IP", p.Name, app.Limits)
		}
		if _, ok := p.Spec.Containers[1].Resources.Limits[underlay.Resource]; ok {
			t.Errorf("%s: the second container got an IP too", p.Name)
		}
		if p.Spec.SchedulerName != "capscale-scheduler" {
			t.Errorf("%s: schedulerName %q, want capscale-scheduler", p.Name, p.Spec.SchedulerName)
		}
	}
	waitPendingMessage(ctx, t, s, marked, "underlay IPs exhausted: 2/2 used, pod needs 1")

	hostNet := plainPod(marked, "host-net")
	hostNet.Spec.HostNetwork = true
	explicit := underlayPod(marked, "explicit", "x")
	explicit.Spec.Containers[0].Resources.Limits = underlayRequest(2)
	initOnly := plainPod(marked, "init-only")
	initOnly.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "registry.example/setup:1",
		Resources: corev1.ResourceRequirements{Requests: underlayRequest(1), Limits: underlayRequest(1)}}}
	zero := plainPod(marked, "zero")
	zero.Spec.Containers[0].Resources.Limits = underlayRequest(0)
	other := plainPod(marked, "other-scheduler")
	other.Spec.SchedulerName = "my-scheduler"
	for _, tc := range []struct {
		pod       *corev1.Pod
		need      int64
		scheduler string
	}{
		{pod: hostNet, need: 0, scheduler: "default-scheduler"},
		{pod: plainPod(plain, "unmarked"), need: 0, scheduler: "default-scheduler"},
		{pod: explicit, need: 2, scheduler: "capscale-scheduler"},
		{pod: initOnly, need: 1, scheduler: "capscale-scheduler"},
		{pod: zero, need: 0, scheduler: "capscale-scheduler"},
		// Another scheduler's pod gets no IP either (issue 55 §2): its
		// scheduler's NodeResourcesFit would find no node advertising it.
		{pod: other, need: 0, scheduler: "my-scheduler"},
	} {
		got, err := s.Client.CoreV1().Pods(tc.pod.Namespace).Create(ctx, tc.pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.pod.Namespace, tc.pod.Name, err)
		}
		if n := underlay.PodNeed(got); n != tc.need || got.Spec.SchedulerName != tc.scheduler {
			t.Errorf("%s/%s: needs %d IPs on %s, want %d on %s (containers %+v)", got.Namespace, got.Name, n, got.Spec.SchedulerName, tc.need, tc.scheduler, got.Spec.Containers)
		}
		if tc.pod == initOnly {
			if _, ok := got.Spec.Containers[0].Resources.Limits[underlay.Resource]; ok {
				t.Errorf("init-only: the first container got an IP besides the init container's")
			}
		}
	}
	uncountedWarning(ctx, t, s, marked)
}

// uncountedWarning: kubectl capscale ips, as a user with only
// capscale-kubectl:ips, names the pod of the marked namespace that was
// created before the policy (and only it: hostNetwork, counted and
// unmarked pods are not) on stderr and under "uncounted" in -o json.
func uncountedWarning(ctx context.Context, t *testing.T, s *stack.Stack, ns string) {
	t.Helper()
	kc := kubectlUser(ctx, t, s, "ops", "viewer", "ClusterRole", "capscale-kubectl:ips", true)
	cmd := exec.CommandContext(ctx, filepath.Join(capscaleBin, "kubectl-capscale"), "ips", "-o", "json", "--kubeconfig", kc)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl capscale ips: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var rep ipreport.Report
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	if len(rep.Uncounted) != 1 || rep.Uncounted[0].Namespace != ns || rep.Uncounted[0].Name != "before-policy" {
		t.Errorf("uncounted %+v, want only %s/before-policy", rep.Uncounted, ns)
	}
	if want := "Warning: 1 pods in namespaces labelled capscale.io/underlay=true hold an underlay IP that nobody counts"; !strings.Contains(stderr.String(), want) ||
		!strings.Contains(stderr.String(), ns+"/before-policy on "+plane.NodeName(0)) && !strings.Contains(stderr.String(), ns+"/before-policy on "+plane.NodeName(1)) {
		t.Errorf("stderr %q, want %q naming %s/before-policy", stderr.String(), want, ns)
	}
}

// plainPod is a bare pod with no capscale field.
func plainPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "app", Image: fmt.Sprintf("registry.example/%s:1", name)}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}
