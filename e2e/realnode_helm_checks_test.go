//go:build e2e

package e2e

// What TestRealNodeHelmInstall checks in each mode: the load source and the
// HPA on it, the images, the workload API as its caller, the uninstall.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
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
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

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

// waitSchedulerRollout waits until helm upgrade has made a capscale-scheduler
// pod of image (the new version's): the rollout is under way.
func waitSchedulerRollout(ctx context.Context, t *testing.T, p *plane.Plane, image string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := p.Client.CoreV1().Pods("capscale-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=capscale-scheduler"})
		if err != nil {
			return false, nil
		}
		for _, pod := range pods.Items {
			for _, c := range pod.Spec.Containers {
				if c.Image == image {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("helm upgrade made no capscale-scheduler pod of %s: %v", image, err)
	}
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

// checkUninstalled: the release's pods, APIService and cluster-wide
// objects are gone, and its namespace, which --create-namespace made and
// the release does not own, is left in place.
func checkUninstalled(ctx context.Context, t *testing.T, p *plane.Plane) {
	t.Helper()
	ac, err := aggregator.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall the APIService %s is still there (err %v)", externalMetricsAPIService, err)
	}
	waitReleaseGone(ctx, t, p)
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

// waitReleaseGone waits until capscale's namespace holds no pod and no
// Deployment, and fails if the namespace itself is gone or going: helm
// uninstall must not delete a namespace the operator made (issue 57 §4).
func waitReleaseGone(ctx context.Context, t *testing.T, p *plane.Plane) {
	t.Helper()
	var left string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := p.Client.CoreV1().Pods(capscaleNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ds, err := p.Client.AppsV1().Deployments(capscaleNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left = fmt.Sprintf("%d pods, %d Deployments", len(pods.Items), len(ds.Items))
		return len(pods.Items) == 0 && len(ds.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("after helm uninstall namespace %s still holds %s: %v", capscaleNamespace, left, err)
	}
	ns, err := p.Client.CoreV1().Namespaces().Get(ctx, capscaleNamespace, metav1.GetOptions{})
	if err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("helm uninstall deleted namespace %s, which it does not own (err %v)", capscaleNamespace, err)
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

// checkMinorBuilds: everything of the plane's minor (version, minor) runs
// what that minor needs: kube-apiserver and each node's kubelet are of the
// version, a
// kube-scheduler container runs its image, and capscale-scheduler is the
// build for the minor (/capscale-scheduler-MINOR on an older one).
func checkMinorBuilds(ctx context.Context, t *testing.T, p *plane.Plane, version, minor string) {
	t.Helper()
	if v, err := p.Client.Discovery().ServerVersion(); err != nil || v.GitVersion != version {
		t.Errorf("kube-apiserver %v (%v), want %s", v, err, version)
	}
	nodes, err := p.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if got := n.Status.NodeInfo.KubeletVersion; got != version {
			t.Errorf("node %s runs kubelet %s, want the plane's %s", n.Name, got, version)
		}
	}
	wantBin := "/capscale-scheduler"
	if schedulerMinors(minor) != "" {
		wantBin += "-" + minor
	}
	pods, err := p.Client.CoreV1().Pods("capscale-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		for _, c := range pod.Spec.Containers {
			if strings.HasPrefix(c.Image, "registry.k8s.io/kube-scheduler:") && c.Image != "registry.k8s.io/kube-scheduler:"+version {
				t.Errorf("pod %s runs %s on a %s plane", pod.Name, c.Image, version)
			}
			if len(c.Command) > 0 && strings.HasPrefix(c.Command[0], "/capscale-scheduler") && c.Command[0] != wantBin {
				t.Errorf("pod %s runs %s on a %s plane, want %s", pod.Name, c.Command[0], version, wantBin)
			}
		}
	}
}

// namespaceState says what a failed helm --wait waited on: each pod of ns
// with its node, phase and each container's state, and ns's Warning
// events.
func namespaceState(ctx context.Context, p *plane.Plane, ns string) string {
	var b strings.Builder
	pods, err := p.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("listing the pods of %s: %v", ns, err)
	}
	for _, q := range pods.Items {
		fmt.Fprintf(&b, "pod %s on %q: %s", q.Name, q.Spec.NodeName, q.Status.Phase)
		for _, c := range q.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				fmt.Fprintf(&b, "; %s: %s", c.Type, c.Message)
			}
		}
		for _, c := range q.Status.ContainerStatuses {
			fmt.Fprintf(&b, "; %s ready=%t restarts=%d", c.Name, c.Ready, c.RestartCount)
			if w := c.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if x := c.LastTerminationState.Terminated; x != nil {
				fmt.Fprintf(&b, " last exit %d (%s) %s", x.ExitCode, x.Reason, x.Message)
			}
		}
		b.WriteString("\n")
	}
	evs, err := p.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return b.String() + fmt.Sprintf("listing the events of %s: %v", ns, err)
	}
	for _, e := range evs.Items[max(0, len(evs.Items)-20):] {
		fmt.Fprintf(&b, "event %s %s/%s x%d: %s\n", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Count, e.Message)
	}
	return b.String()
}
