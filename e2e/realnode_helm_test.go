//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
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

	"github.com/capscale/capscale/e2e/nodeimage"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// underlayPoolTaint keeps every pod but the tests' underlay pods off the
// underlay nodes: their IPAM ranges hold exactly their capacity, and a pod
// that asks for no underlay IP (capscale's own) would take one uncounted.
const underlayPoolTaint = "e2e.capscale.io/underlay-pool"

// TestRealNodeHelmInstall (issue 44) installs capscale the way an operator
// does, into a running cluster whose nodes are real: `helm install
// oci://…` of the chart `make release-chart` pushed to a local OCI
// registry, with one --set for the mode and the adapter's load source as
// values; nothing made beforehand. The real nodes pull capscale's image
// (`make image`, pushed beside the chart) and run every component as pods
// that reach the apiserver through the Service kubernetes (the plane's
// service network: kube-proxy built from its module). In each mode:
//   - the burst: 25 underlay pods for two nodes of 10 IPs → 20 Running,
//     5 Pending, the IPAM never ahead of capscale's count;
//   - an HPA created before the install reads capscale-load-index (its
//     first reading timed from `helm install`) and scales on it;
//   - the workload API, through its Service, restarts a Deployment as
//     the caller (the audit log names the caller) and refuses one without
//     the right;
//   - `helm upgrade` to a second version, while the HPA reads and an IP is
//     freed and taken: no failed HPA read, no over-commit, every pod of
//     the new image;
//   - `helm uninstall --wait` removes it all, the APIService included; in
//     native mode the release finalizer (on by default) was on every burst
//     pod and its pre-delete hook (`extender release-cleanup`, a Job on the
//     system node) leaves it on none, so the namespaces' deletion completes.
//
// Then, with another adapter owning the APIService (custom-metrics-apiserver's
// test-adapter as a pod), `--set apiService.delegate=true`: capscale serves
// both adapters' metrics, and `helm uninstall` gives the APIService back.
//
// One extra image is imported on the nodes: the plane's kube-scheduler,
// built from its module, as registry.k8s.io/kube-scheduler:VERSION (the
// chart's default for extender and native mode on that minor; this
// machine cannot pull it). make test-compat runs it on each older minor's
// plane, its kubelet and kube-proxy included, and the image holds that
// minor's capscale-scheduler.
func TestRealNodeHelmInstall(t *testing.T) {
	ctx := testContext(t, 40*time.Minute)
	work := t.TempDir()
	reg := startRegistry(ctx, t, work)
	stamp := time.Now().Unix()
	versions := []string{fmt.Sprintf("v0.0.0-e2e.%d", stamp), fmt.Sprintf("v0.0.1-e2e.%d", stamp)}
	for _, v := range versions {
		start := time.Now()
		makeImage(ctx, t, filepath.Join(work, v), reg, v)
		if got := pushChart(ctx, t, filepath.Join(work, v), reg, v); got != reg+"/capscale:"+v {
			t.Fatalf("the chart %s names the image %s", v, got)
		}
		t.Logf("image and chart %s pushed to %s in %.1fs", v, reg, time.Since(start).Seconds())
	}
	kubeVersion, kubeMinor := planeKubernetes(ctx, t)
	ks := kubeSchedulerImage(t, work, kubeVersion)
	ta := testAdapterArchive(ctx, t, work)

	p := startPlane(t, plane.Options{
		// No kwok node: every pod runs for real.
		Nodes: -1, RealNodes: 3, RealNodeCapacities: []int{24, 10, 10},
		RealNodeRegistries: []string{reg}, RealNodeImages: []nodeimage.Image{ks, ta},
		ServiceNetwork: true,
	})
	t.Cleanup(func() {
		if err := p.StopRealNodes(); err != nil {
			t.Errorf("real nodes' cleanup: %v", err)
		}
	})
	s := &stack.Stack{Plane: p}
	t.Logf("Kubernetes %s: kube-apiserver, kubelets and kube-scheduler image of that version; capscale-scheduler %s",
		kubeVersion, map[bool]string{true: "built for " + kubeMinor, false: "of the repo's minor"}[schedulerMinors(kubeMinor) != ""])
	system, underlay := p.RealNodes[0], p.RealNodes[1:]
	// The system node takes no underlay pod (capacity 0 by annotation,
	// which wins over its label); the underlay nodes take nothing else.
	patchNode(ctx, t, p, system.Name, map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{names.UnderlayIPCapacityAnnotation: "0"}}})
	for _, n := range underlay {
		patchNode(ctx, t, p, n.Name, map[string]any{"spec": map[string]any{
			"taints": []corev1.Taint{{Key: underlayPoolTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}})
	}

	loadURL, setLoad := startLoadSource(ctx, t, p)
	values := filepath.Join(work, "values.yaml")
	if err := os.WriteFile(values, fmt.Appendf(nil, `metricsAdapter:
  config:
    sources:
    - name: web-load
      url: %s
      jsonPath: '{.load}'
      interval: 2s
      timeout: 1s
      maxAge: 30s
`, loadURL), 0o644); err != nil {
		t.Fatal(err)
	}
	helm := helmCommand(ctx, t, p)
	chart := "oci://" + reg + "/charts/capscale"

	for _, mode := range []string{"plugin", "extender", "native"} {
		t.Run(mode, func(t *testing.T) {
			setLoad(0.1)
			hpaNS, burstNS := "hpa-"+mode, "burst-"+mode
			createLoadHPA(ctx, t, p, hpaNS)

			start := time.Now()
			out, err := helm("install", "capscale", chart, "--version", strings.TrimPrefix(versions[0], "v"), "--plain-http", "--create-namespace",
				"--set", "extender.mode="+mode, "-f", values, "--wait", "--timeout", helmWait)
			if err != nil {
				t.Fatalf("helm install (%s mode): %v\n%s\n%s", mode, err, out, namespaceState(ctx, p, "capscale-system"))
			}
			installed := time.Since(start)
			read := waitHPAReading(ctx, t, p, hpaNS, 3*time.Minute)
			t.Logf("%s mode: helm install --wait %.1fs; its first HPA reading of %s (%s) %.1fs after helm install began",
				mode, installed.Seconds(), names.LoadIndexMetric, read, time.Since(start).Seconds())
			checkImages(ctx, t, p, reg+"/capscale:"+versions[0])
			checkMinorBuilds(ctx, t, p, kubeVersion, kubeMinor)

			// The burst, on the two underlay nodes.
			if err := p.WaitForNamespace(ctx, burstNS); err != nil {
				t.Fatal(err)
			}
			watch := watchIPAM(ctx, t, s, underlay)
			var pods []*corev1.Pod
			for i := range 25 {
				pods = append(pods, poolPod(burstNS, fmt.Sprintf("p-%02d", i)))
			}
			createPods(ctx, t, s, pods...)
			st := waitRealState(ctx, t, s, burstNS, 3*time.Minute, "20 Running, 5 Pending", func(st realState) bool {
				return st.runningCount() == 20 && len(st.creating) == 0 && len(st.pending) == 5
			})
			for _, n := range underlay {
				if got := len(st.running[n.Name]); got != 10 {
					t.Errorf("%s runs %d pods, want 10 (%s)", n.Name, got, st)
				}
			}
			checkRunningIPs(t, underlay, st)
			// Native mode's release finalizer is on by default where helm
			// sees the cluster and it serves MutatingAdmissionPolicy v1
			// (extender.releaseFinalizer auto; 1.36+).
			if got, want := len(podsWithReleaseFinalizer(ctx, t, p, burstNS)), map[bool]int{true: 25}[mode == "native" && admissionPolicyServed(p) == "v1"]; got != want {
				t.Errorf("%d pods carry %s, want %d", got, names.UnderlayIPReleaseFinalizer, want)
			}
			checkPendingReason(ctx, t, s, burstNS, st.pending, realExhausted[mode])
			waitIPAMSettled(ctx, t, watch, 10)

			// The HPA scales on the load index, 100m a replica (up only:
			// a scale-down waits out the HPA's 5-minute stabilization).
			setLoad(0.2)
			if err := waitDeploymentReplicas(ctx, p, hpaNS, "web", 2, 2*time.Minute); err != nil {
				t.Fatal(err)
			}

			checkWorkloadAPIAsCaller(ctx, t, p, hpaNS)

			// helm upgrade to the second version, while the HPA reads and
			// an IP is freed and taken again.
			hpaWatch := pollHPAReadings(ctx, p, hpaNS)
			upgraded := make(chan error, 1)
			go func() {
				out, err := helm("upgrade", "capscale", chart, "--version", strings.TrimPrefix(versions[1], "v"), "--plain-http",
					"--set", "extender.mode="+mode, "-f", values, "--wait", "--timeout", helmWait)
				if err != nil {
					err = fmt.Errorf("%w\n%s\n%s", err, out, namespaceState(ctx, p, "capscale-system"))
				}
				upgraded <- err
			}()
			// The IP is freed once the new scheduler pods are being made,
			// while the old ones still lead: the binds go on across the
			// handover.
			waitSchedulerRollout(ctx, t, p, reg+"/capscale:"+versions[1])
			took := freeOneIP(ctx, t, s, burstNS, underlay[0].Name)
			t.Logf("%s mode: during helm upgrade, a freed IP was taken by a Pending pod in %.1fs", mode, took.Seconds())
			if err := <-upgraded; err != nil {
				t.Fatalf("helm upgrade: %v", err)
			}
			checkImages(ctx, t, p, reg+"/capscale:"+versions[1])
			// The watch goes on until the HPA has scaled on a reading of the
			// new adapters.
			setLoad(0.3)
			scaled := waitDeploymentReplicas(ctx, p, hpaNS, "web", 3, 2*time.Minute)
			hpaWatch.check(t, "the HPA reading its metric through the upgrade")
			if scaled != nil {
				t.Fatalf("after helm upgrade: %v", scaled)
			}
			watch.end()
			watch.check(t)
			if st, err := realPodState(ctx, s, burstNS); err != nil || st.runningCount() != 20 || len(st.pending) != 4 {
				t.Errorf("after the upgrade: %s (%v), want 20 Running and 4 Pending", st, err)
			}

			// helm uninstall removes it all; the next mode starts afresh.
			if n := len(capscaleClusterBindings(ctx, t, p)); n == 0 {
				t.Errorf("no ClusterRoleBinding of capscale's while installed")
			}
			if out, err := helm("uninstall", "capscale", "--wait", "--timeout", helmWait); err != nil {
				t.Fatalf("helm uninstall: %v\n%s\n%s", err, out, namespaceState(ctx, p, "capscale-system"))
			}
			checkUninstalled(ctx, t, p)
			// Its uninstall hook stripped it: the namespaces' deletion
			// below completes.
			if left := podsWithReleaseFinalizer(ctx, t, p, metav1.NamespaceAll); len(left) > 0 {
				t.Errorf("after helm uninstall pods %v carry %s", left, names.UnderlayIPReleaseFinalizer)
			}
			for _, ns := range []string{burstNS, hpaNS} {
				if err := p.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			waitGone(ctx, t, p, burstNS)
		})
		if t.Failed() {
			return
		}
	}
	t.Run("delegate", func(t *testing.T) {
		testDelegateInstall(ctx, t, p, helm, []string{"install", "capscale", chart, "--version", strings.TrimPrefix(versions[1], "v"),
			"--plain-http", "--create-namespace", "--set", "extender.mode=plugin", "-f", values, "--wait", "--timeout", helmWait}, system.Name)
	})
}

// helmWait bounds each helm --wait of the real-node install: a bound for
// a stuck install, not a speed (about 1.5 min for a whole mode here).
const helmWait = "10m"

// kubeSchedulerImage wraps the plane's kube-scheduler (static, built from
// its module, of version) as the image the chart names by default on the
// plane's minor.
func kubeSchedulerImage(t *testing.T, dir, version string) nodeimage.Image {
	t.Helper()
	bin, err := os.ReadFile(toolBin(t, "kube-scheduler"))
	if err != nil {
		t.Fatalf("kube-scheduler (make control-plane): %v", err)
	}
	im := nodeimage.Image{Ref: "registry.k8s.io/kube-scheduler:" + version, Tarball: filepath.Join(dir, "kube-scheduler.tar")}
	if err := nodeimage.WriteDockerArchive(im.Tarball, im.Ref, "kube-scheduler", bin); err != nil {
		t.Fatal(err)
	}
	return im
}

func patchNode(ctx context.Context, t *testing.T, p *plane.Plane, name string, patch map[string]any) {
	t.Helper()
	b, err := json.Marshal(patch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching node %s: %v", name, err)
	}
}

// podsWithReleaseFinalizer names the pods of ns that carry native mode's
// release finalizer.
func podsWithReleaseFinalizer(ctx context.Context, t *testing.T, p *plane.Plane, ns string) []string {
	t.Helper()
	pods, err := p.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, q := range pods.Items {
		if slices.Contains(q.Finalizers, names.UnderlayIPReleaseFinalizer) {
			out = append(out, q.Namespace+"/"+q.Name)
		}
	}
	return out
}
