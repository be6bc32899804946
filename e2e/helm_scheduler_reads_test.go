//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestHelmSchedulerReads: the chart rendered with capacity sources on in
// plugin mode, schedulerReads left at its default (auto: on), and applied
// (server-side, as a GitOps tool would) is all capscale-scheduler needs to
// read the IPAM's objects itself. It runs as the render's ServiceAccount,
// with the render's RBAC and configuration (the mounted sources file at a
// path of this machine), and no capscale-controller runs at all, so no
// Node is ever mirrored. A pod waits on a node whose pool is full and binds once
// the IPAM's object grows. kwok nodes run no container: capscale-scheduler
// runs as a process beside the plane's stock kube-scheduler.
func TestHelmSchedulerReads(t *testing.T) {
	src := ownIPAM(t)
	s := startStack(t, stack.Options{Plane: plane.Options{Nodes: 1, Logf: t.Logf},
		Prepare: func(ctx context.Context, s *stack.Stack) error { return src.crd(ctx, s) }})
	ctx := testContext(t, 5*time.Minute)
	version, err := s.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(`extender: {mode: plugin}
controller:
  capacitySources:
    enabled: true
    sources:
    - name: own-ipam
      resource: {group: ipam.example.com, version: v1, resource: nodeippools}
      node: object.spec.nodeName
      capacity: object.status.allocatable
      draws: marked
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := helmCommand(ctx, t, s.Plane)("template", "capscale", filepath.Join("deploy", "helm", "capscale"), "-f", values,
		"--kube-version", version.GitVersion, "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	render := filepath.Join(t.TempDir(), "capscale.yaml")
	if err := os.WriteFile(render, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", render); err != nil {
		t.Fatalf("kubectl apply --server-side of the render: %v\n%s", err, out)
	}

	// The scheduler's configuration and sources file, as its pod mounts them.
	config := renderedData(t, out, "capscale-scheduler-config", "config.yaml")
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(sources, []byte(renderedData(t, out, "capscale-capacity-sources", "sources.yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	const mounted = "/etc/capscale-capacity-sources/sources.yaml"
	if strings.Count(config, mounted) != 1 {
		t.Fatalf("the scheduler's configuration names %s %d times, want once:\n%s", mounted, strings.Count(config, mounted), config)
	}
	config = strings.Replace(config, mounted, sources, 1)
	kc, err := s.ServiceAccountKubeconfig(ctx, stack.Namespace, "capscale-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	proc, err := s.StartSchedulerBinary(ctx, "capscale-scheduler", filepath.Join(capscaleBin, "capscale-scheduler"), config, kc)
	if err != nil {
		t.Fatalf("capscale-scheduler with the render's configuration: %v", err)
	}

	node := plane.NodeName(0)
	putObject(ctx, t, s, src.gvr, src.object(node, "", 2))
	const ns = "helm-reads"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pods := pinnedPods(ns, node, 3)
	for _, p := range pods {
		p.Spec.SchedulerName = "capscale-scheduler"
	}
	createPods(ctx, t, s, pods...)
	waitUnderlay(ctx, t, s, ns, map[string]int{node: 2}, 2, 1)
	stayBoundPending(ctx, t, s, ns, 2, 1, 2*time.Second)
	if reason := failedSchedulingReasons(ctx, s, ns); !strings.Contains(reason, "2/2 used") {
		t.Errorf("the waiting pod's reason %q does not name the object's 2 IPs", reason)
	}

	start := time.Now()
	putObject(ctx, t, s, src.gvr, src.object(node, "", 3))
	waitUnderlay(ctx, t, s, ns, map[string]int{node: 3}, 3, 0)
	t.Logf("the object to the waiting pod bound, no capscale-controller running: %s", time.Since(start).Round(time.Millisecond))

	n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{names.UnderlayIPSourceCapacityAnnotation, names.UnderlayIPSourceAnnotation} {
		if v, ok := n.Annotations[k]; ok {
			t.Errorf("node %s carries %s=%q: something mirrored, so the scheduler's own read is not what was tested", node, k, v)
		}
	}
	if exited, err := proc.Exited(); exited {
		t.Fatalf("capscale-scheduler exited: %v\n%s", err, proc.Tail(30))
	}
}

// renderedData is data[key] of the ConfigMap name in a helm render.
func renderedData(t *testing.T, render, name, key string) string {
	t.Helper()
	for _, doc := range strings.Split(render, "\n---\n") {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil || cm.Kind != "ConfigMap" || cm.Name != name {
			continue
		}
		if v, ok := cm.Data[key]; ok {
			return v
		}
	}
	t.Fatalf("the render has no ConfigMap %s with %s", name, key)
	return ""
}
