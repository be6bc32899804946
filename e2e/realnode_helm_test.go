//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

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
//   - `helm uninstall --wait` removes it all, the APIService included.
//
// Then, with another adapter owning the APIService (custom-metrics-apiserver's
// test-adapter as a pod), `--set apiService.delegate=true`: capscale serves
// both adapters' metrics, and `helm uninstall` gives the APIService back.
//
// One extra image is imported on the nodes: kube-scheduler v1.37.2, built
// from its module, as registry.k8s.io/kube-scheduler:v1.37.2 (the chart's
// default for extender and native mode; this machine cannot pull it).
func TestRealNodeHelmInstall(t *testing.T) {
	helmBin := filepath.Join(os.Getenv("CAPSCALE_BIN_DIR"), "helm")
	if _, err := os.Stat(helmBin); err != nil {
		t.Fatalf("helm is not in CAPSCALE_BIN_DIR (make deploy-tools): %v", err)
	}
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
	ks := kubeSchedulerImage(t, work)
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
	helm := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, helmBin, append(args, "--kubeconfig", p.Kubeconfig)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(work, "helm-cache"),
			"HELM_CONFIG_HOME="+filepath.Join(work, "helm-config"), "HELM_DATA_HOME="+filepath.Join(work, "helm-data"))
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	chart := "oci://" + reg + "/charts/capscale"

	for _, mode := range []string{"plugin", "extender", "native"} {
		t.Run(mode, func(t *testing.T) {
			setLoad(0.1)
			hpaNS, burstNS := "hpa-"+mode, "burst-"+mode
			createLoadHPA(ctx, t, p, hpaNS)

			start := time.Now()
			out, err := helm("install", "capscale", chart, "--version", strings.TrimPrefix(versions[0], "v"), "--plain-http",
				"--set", "extender.mode="+mode, "-f", values, "--wait", "--timeout", "5m")
			if err != nil {
				t.Fatalf("helm install (%s mode): %v\n%s", mode, err, out)
			}
			installed := time.Since(start)
			read := waitHPAReading(ctx, t, p, hpaNS, 3*time.Minute)
			t.Logf("%s mode: helm install --wait %.1fs; its first HPA reading of %s (%s) %.1fs after helm install began",
				mode, installed.Seconds(), names.LoadIndexMetric, read, time.Since(start).Seconds())
			checkImages(ctx, t, p, reg+"/capscale:"+versions[0])

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
					"--set", "extender.mode="+mode, "-f", values, "--wait", "--timeout", "5m")
				if err != nil {
					err = fmt.Errorf("%w\n%s", err, out)
				}
				upgraded <- err
			}()
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
			hpaWatch.check(t, "the HPA reading its metric through the upgrade", 10)
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
			if out, err := helm("uninstall", "capscale", "--wait", "--timeout", "3m"); err != nil {
				t.Fatalf("helm uninstall: %v\n%s", err, out)
			}
			checkUninstalled(ctx, t, p)
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
			"--plain-http", "--set", "extender.mode=plugin", "-f", values, "--wait", "--timeout", "5m"}, system.Name)
	})
}

// testAdapterImage is custom-metrics-apiserver's test-adapter as an image
// of the real nodes (the delegation install's other adapter).
const testAdapterImage = "capscale.local/test-adapter:1"

// testAdapterArchive builds the test-adapter static (a pod has no libc of
// the host) and wraps it as testAdapterImage.
func testAdapterArchive(ctx context.Context, t *testing.T, dir string) nodeimage.Image {
	t.Helper()
	bin := filepath.Join(dir, "test-adapter")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "sigs.k8s.io/custom-metrics-apiserver/test-adapter")
	cmd.Dir = plane.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the test-adapter: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	im := nodeimage.Image{Ref: testAdapterImage, Tarball: bin + ".tar"}
	if err := nodeimage.WriteDockerArchive(im.Tarball, im.Ref, "test-adapter", b); err != nil {
		t.Fatal(err)
	}
	return im
}

// kubeSchedulerImage wraps the plane's kube-scheduler (static, built from
// its module) as the image the chart names by default.
func kubeSchedulerImage(t *testing.T, dir string) nodeimage.Image {
	t.Helper()
	bin, err := os.ReadFile(filepath.Join(os.Getenv("CAPSCALE_BIN_DIR"), "kube-scheduler"))
	if err != nil {
		t.Fatalf("kube-scheduler (make control-plane): %v", err)
	}
	im := nodeimage.Image{Ref: "registry.k8s.io/kube-scheduler:v1.37.2", Tarball: filepath.Join(dir, "kube-scheduler.tar")}
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

// startLoadSource runs the load index the adapter polls: the web image's
// /load, as a pod on the system node behind a Service (no cluster DNS
// here: the adapter is given its ClusterIP). setLoad changes the load, from
// the host to the pod's IP.
func startLoadSource(ctx context.Context, t *testing.T, p *plane.Plane) (string, func(float64)) {
	t.Helper()
	const ns = "load-source"
	if err := p.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pod := plane.RealNodePod(ns, "load")
	pod.Labels = map[string]string{"app": "load"}
	if _, err := p.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "load"},
		Spec: corev1.ServiceSpec{Selector: pod.Labels,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	svc, err := p.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var podIP string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := p.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		podIP = got.Status.PodIP
		return podIP != "", nil
	})
	if err != nil {
		t.Fatalf("the load source's pod: %v", err)
	}
	set := func(v float64) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("http://%s:8080/load?value=%v", podIP, v), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("setting the load to %v: %v", v, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("setting the load to %v: %s", v, resp.Status)
		}
	}
	return fmt.Sprintf("http://%s/load", svc.Spec.ClusterIP), set
}

// createLoadHPA creates the Deployment web (1 replica, on the system node)
// and an HPA on capscale-load-index{source=web-load}: 100m a replica, 1..3.
func createLoadHPA(ctx context.Context, t *testing.T, p *plane.Plane, ns string) {
	t.Helper()
	if err := p.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	tmpl := plane.RealNodePod(ns, "")
	tmpl.Labels = labels
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
		},
	}
	if _, err := p.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    ptr.To(int32(1)), MaxReplicas: 3,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ExternalMetricSourceType,
				External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: names.LoadIndexMetric,
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"source": "web-load"}}},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewMilliQuantity(100, resource.DecimalSI)},
				},
			}},
		},
	}
	if _, err := p.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// hpaReading is the HPA's current value of its external metric, if it
// read one and can scale with it.
func hpaReading(h *autoscalingv2.HorizontalPodAutoscaler) (string, bool) {
	active := false
	for _, c := range h.Status.Conditions {
		if c.Type == autoscalingv2.ScalingActive && c.Status == corev1.ConditionTrue {
			active = true
		}
	}
	for _, m := range h.Status.CurrentMetrics {
		if m.External != nil && m.External.Current.AverageValue != nil && active {
			return m.External.Current.AverageValue.String(), true
		}
	}
	return "", false
}

func waitHPAReading(ctx context.Context, t *testing.T, p *plane.Plane, ns string, timeout time.Duration) string {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		h, err := p.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		var ok bool
		got, ok = hpaReading(h)
		return ok, nil
	})
	if err != nil {
		h, _ := p.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "web", metav1.GetOptions{})
		t.Fatalf("the HPA read no %s within %s: %v; status %+v", names.LoadIndexMetric, timeout, err, h.Status)
	}
	return got
}

func waitDeploymentReplicas(ctx context.Context, p *plane.Plane, ns, name string, want int32, timeout time.Duration) error {
	var have int32
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := p.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		have = d.Status.ReadyReplicas
		return *d.Spec.Replicas == want && have == want, nil
	})
	if err != nil {
		return fmt.Errorf("%s/%s: %d ready, want %d (the HPA's doing): %w", ns, name, have, want, err)
	}
	return nil
}

// pollHPAReadings watches the HPA web of ns: a poll that finds it without
// a reading of its metric (ScalingActive false, no current value) is a
// failed read.
func pollHPAReadings(ctx context.Context, p *plane.Plane, ns string) *pollWatch {
	return startPollWatch(ctx, 500*time.Millisecond, func(ctx context.Context) (string, bool) {
		h, err := p.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return "", false
		}
		if _, ok := hpaReading(h); !ok {
			return fmt.Sprintf("%+v", h.Status.Conditions), true
		}
		return "", true
	})
}

// checkImages: every capscale pod runs image, pulled by its node.
func checkImages(ctx context.Context, t *testing.T, p *plane.Plane, image string) {
	t.Helper()
	pods, err := p.Client.CoreV1().Pods("capscale-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range pod.Status.ContainerStatuses {
			if strings.HasPrefix(c.Image, "registry.k8s.io/kube-scheduler") {
				continue
			}
			n++
			if c.Image != image || !c.Ready {
				t.Errorf("pod %s container %s: image %s ready %v, want %s ready", pod.Name, c.Name, c.Image, c.Ready, image)
			}
		}
	}
	if n == 0 {
		t.Errorf("no capscale container runs in capscale-system")
	}
}

// checkWorkloadAPIAsCaller calls the workload API through its Service
// (kube-proxy, from the host), TLS verified with the CA the adapter made:
// a restart as a caller bound to capscale-workload:restart is done with the
// caller's identity (the audit log names it, not capscale's account), and
// one without the binding gets the apiserver's 403.
func checkWorkloadAPIAsCaller(ctx context.Context, t *testing.T, p *plane.Plane, ns string) {
	t.Helper()
	const sysNS = "capscale-system"
	secret, err := p.Client.CoreV1().Secrets(sysNS).Get(ctx, "capscale-serving-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secret.Data["ca.crt"]) {
		t.Fatalf("the serving Secret's ca.crt holds no certificate")
	}
	svc, err := p.Client.CoreV1().Services(sysNS).Get(ctx, "capscale-workload-api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: "capscale-workload-api." + sysNS + ".svc", MinVersion: tls.VersionTLS12}}}
	s := &stack.Stack{Plane: p, WorkloadAPIURL: "https://" + svc.Spec.ClusterIP}
	operator, err := p.ServiceAccountToken(ctx, ns, "operator")
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := p.ServiceAccountToken(ctx, ns, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "operator-restart"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "capscale-workload:restart"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "operator"}},
	}
	if _, err := p.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	path := "/v1/namespaces/" + ns + "/deployments/web/restart"
	var e apiError
	// The binding reaches the authorizer's cache within a moment: a 403
	// until then; a restart is 202 (the rollout goes on).
	code := 0
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		code = (&apiClient{t: t, s: s, http: hc, token: operator}).do(ctx, "POST", path, nil, nil)
		return code != http.StatusForbidden, nil
	})
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("restart as the operator through the workload API's Service: %d, want 202 (%v)", code, err)
	}
	if code := (&apiClient{t: t, s: s, http: hc, token: nobody}).do(ctx, "POST", path, nil, &e); code != http.StatusForbidden ||
		!strings.Contains(e.Message, "system:serviceaccount:"+ns+":nobody") {
		t.Errorf("restart as nobody: %d %+v, want the apiserver's 403 naming the caller", code, e)
	}
	user := "system:serviceaccount:" + ns + ":operator"
	found := false
	for _, ev := range auditWrites(t, p.AuditLog) {
		if ev.ObjectRef.Resource == "deployments" && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == "web" &&
			ev.Verb == "patch" && ev.ResponseStatus.Code == http.StatusOK {
			if ev.User.Username != user {
				t.Errorf("the restart's patch was made by %s, want the caller %s", ev.User.Username, user)
			}
			found = true
		}
	}
	if !found {
		t.Errorf("no patch of deployment %s/web in the audit log", ns)
	}
}

// checkUninstalled: the release's namespace, APIService and cluster-wide
// objects are gone.
func checkUninstalled(ctx context.Context, t *testing.T, p *plane.Plane) {
	t.Helper()
	ac, err := aggregator.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall the APIService %s is still there (err %v)", externalMetricsAPIService, err)
	}
	waitGone(ctx, t, p, "capscale-system")
	for _, c := range capscaleClusterBindings(ctx, t, p) {
		t.Errorf("after helm uninstall ClusterRoleBinding %s is left", c)
	}
}

// capscaleClusterBindings names the chart's ClusterRoleBindings.
func capscaleClusterBindings(ctx context.Context, t *testing.T, p *plane.Plane) []string {
	t.Helper()
	crbs, err := p.Client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=capscale"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range crbs.Items {
		out = append(out, c.Name)
	}
	return out
}

// waitGone waits until namespace ns is deleted.
func waitGone(ctx context.Context, t *testing.T, p *plane.Plane, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := p.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("namespace %s not gone: %v", ns, err)
	}
}

// poolPod is a pod for the underlay nodes: one underlay IP, capscale's
// scheduler, the pool's taint tolerated.
func poolPod(ns, name string) *corev1.Pod {
	p := realPod(ns, name, 1)
	p.Spec.SchedulerName = "capscale-scheduler" // the chart's second scheduler
	p.Spec.Tolerations = []corev1.Toleration{{Key: underlayPoolTaint, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	return p
}

// delegateNS and the test-adapter's Service, for the delegation install.
const helmDelegateNS = "other-adapter"

// startDelegatePod runs custom-metrics-apiserver's test-adapter (built
// static, imported on the nodes as capscale.local/test-adapter:1) as a pod
// on the system node, as its own ServiceAccount, serving a certificate of
// the cluster CA for its Service, and makes it the owner of the
// external-metrics APIService: another adapter, installed before capscale.
func startDelegatePod(ctx context.Context, t *testing.T, p *plane.Plane, system string) {
	t.Helper()
	if err := p.WaitForNamespace(ctx, helmDelegateNS); err != nil {
		t.Fatal(err)
	}
	rbac := filepath.Join(t.TempDir(), "rbac.yaml")
	if err := os.WriteFile(rbac, []byte(stack.TestAdapterRBAC(helmDelegateNS)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := p.Kubectl(ctx, "apply", "-f", rbac); err != nil {
		t.Fatalf("the test-adapter's RBAC: %v\n%s", err, out)
	}
	cert, err := p.ServingCert("test-adapter-pod", "test-adapter."+helmDelegateNS+".svc")
	if err != nil {
		t.Fatal(err)
	}
	crt, err := os.ReadFile(cert.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(cert.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: helmDelegateNS, Name: "test-adapter-tls"},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": crt, "tls.key": key}}
	if _, err := p.Client.CoreV1().Secrets(helmDelegateNS).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "test-adapter"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: helmDelegateNS, Name: "test-adapter", Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:           system,
			ServiceAccountName: "test-adapter",
			Containers: []corev1.Container{{
				Name: "test-adapter", Image: testAdapterImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/test-adapter", "--secure-port=6443",
					"--tls-cert-file=/tls/tls.crt", "--tls-private-key-file=/tls/tls.key"},
				VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: sec.Name}}}},
		},
	}
	if _, err := p.Client.CoreV1().Pods(helmDelegateNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: helmDelegateNS, Name: "test-adapter"},
		Spec: corev1.ServiceSpec{Selector: labels,
			Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(6443)}}},
	}
	if _, err := p.Client.CoreV1().Services(helmDelegateNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ac, err := aggregator.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, otherAdapterAPIService(helmDelegateNS, "test-adapter", p.PKI.ClusterCA.CAData()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAPIServiceAvailable(ctx, t, ac, helmDelegateNS+"/test-adapter")
}

// waitAPIServiceAvailable waits until the external-metrics APIService
// routes to service (namespace/name) and is Available.
func waitAPIServiceAvailable(ctx context.Context, t *testing.T, ac aggregator.Interface, service string) *apiregv1.APIService {
	t.Helper()
	var last string
	var got *apiregv1.APIService
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		svc, _, available, msg := apiServiceState(ctx, t, ac)
		last = fmt.Sprintf("service %s, available %v: %s", svc, available, msg)
		if svc != service || !available {
			return false, nil
		}
		a, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{})
		got = a
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the APIService never routed to %s and Available: %v; last: %s", service, err, last)
	}
	return got
}

// testDelegateInstall: with the test-adapter owning the APIService, `helm
// install --set apiService.delegate=true` takes it over (the adapter
// records the owner): the delegate's metric is answered through capscale,
// capscale's own too; `helm uninstall` gives the APIService back to the
// delegate exactly as it was (its pre-delete hook, a Job on a real node),
// Available again, and capscale's namespace goes.
func testDelegateInstall(ctx context.Context, t *testing.T, p *plane.Plane, helm func(...string) (string, error), install []string, system string) {
	ac, err := aggregator.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	startDelegatePod(ctx, t, p, system)
	original, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := helm(append(install, "--set", "apiService.delegate=true")...); err != nil {
		t.Fatalf("helm install --set apiService.delegate=true: %v\n%s", err, out)
	}
	waitAPIServiceAvailable(ctx, t, ac, "capscale-system/capscale-metrics-adapter")
	s := &stack.Stack{Plane: p}
	var got string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		theirs, err1 := externalMetric(ctx, s, "my-external-metric", "foo=bar")
		ours, err2 := externalMetric(ctx, s, names.LoadIndexMetric, "source=web-load")
		got = fmt.Sprintf("%v %v / %v %v", theirs, err1, ours, err2)
		return err1 == nil && err2 == nil && len(theirs.Items) == 1 && theirs.Items[0].Value.Value() == 42 && len(ours.Items) == 1, nil
	})
	if err != nil {
		t.Fatalf("through capscale, the delegate's my-external-metric{foo=bar} (42) and capscale's own: %v; last %s", err, got)
	}

	if out, err := helm("uninstall", "capscale", "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	back := waitAPIServiceAvailable(ctx, t, ac, helmDelegateNS+"/test-adapter")
	if back.Spec.Service.Namespace != original.Spec.Service.Namespace || *back.Spec.Service.Port != *original.Spec.Service.Port ||
		string(back.Spec.CABundle) != string(original.Spec.CABundle) || back.Spec.InsecureSkipTLSVerify ||
		back.Spec.GroupPriorityMinimum != original.Spec.GroupPriorityMinimum || back.Spec.VersionPriority != original.Spec.VersionPriority {
		t.Errorf("after helm uninstall the APIService is %+v, want the delegate's as it was: %+v", back.Spec, original.Spec)
	}
	waitGone(ctx, t, p, "capscale-system")
	if theirs, err := externalMetric(ctx, s, "my-external-metric", "foo=bar"); err != nil || len(theirs.Items) != 1 {
		t.Errorf("the delegate's metric after the uninstall: %v %v", theirs, err)
	}
}
