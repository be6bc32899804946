//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
)

// TestSmoke proves the plane is real: the scheduler places a Deployment's pods
// on kwok nodes, kwok runs them, an HPA is accepted and the aggregation layer
// serves discovery.
func TestSmoke(t *testing.T) {
	p := startPlane(t, plane.Options{Nodes: 5})
	ctx := testContext(t, 2*time.Minute)
	const ns = "smoke"
	if err := p.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	nodes, err := p.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kwokNodes := map[string]bool{}
	for _, n := range nodes.Items {
		if n.Annotations[plane.KwokAnnotation] == "fake" && plane.NodeReady(&n) {
			kwokNodes[n.Name] = true
		}
	}
	if len(kwokNodes) != 5 {
		t.Fatalf("want 5 Ready kwok nodes, got %d", len(kwokNodes))
	}

	dep := SimpleDeployment(ns, "web", 3, nil)
	if _, err := p.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := WaitForRunningPods(ctx, t, p, ns, "app=web", 3)
	for _, pod := range pods {
		if !kwokNodes[pod.Spec.NodeName] {
			t.Errorf("pod %s on %q, want a kwok node", pod.Name, pod.Spec.NodeName)
		}
	}
	// The default scheduler bound them: there is a Scheduled event from it.
	events, err := p.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Scheduled"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) < 3 {
		t.Errorf("want at least 3 Scheduled events from kube-scheduler, got %d", len(events.Items))
	}
	for _, e := range events.Items {
		if e.ReportingController != "default-scheduler" && e.Source.Component != "default-scheduler" {
			t.Errorf("Scheduled event from %q/%q, want default-scheduler", e.ReportingController, e.Source.Component)
		}
	}

	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    ptr.To(int32(1)),
			MaxReplicas:    5,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ExternalMetricSourceType,
				External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: "capscale-desired-replicas"},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewQuantity(1, resource.DecimalSI)},
				},
			}},
		},
	}
	if _, err := p.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("HPA rejected: %v", err)
	}

	out, err := p.Kubectl(ctx, "get", "--raw", "/apis")
	if err != nil {
		t.Fatal(err)
	}
	for _, group := range []string{`"apiregistration.k8s.io"`, `"apps"`, `"autoscaling"`} {
		if !strings.Contains(out, group) {
			t.Errorf("/apis lacks group %s", group)
		}
	}
	ver, err := p.Kubectl(ctx, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ver, `"gitVersion": "v1.37.2"`) {
		t.Errorf("kubectl version does not report v1.37.2:\n%s", ver)
	}
}

// SimpleDeployment is a Deployment of a do-nothing container that kwok runs;
// requests, when given, go to requests and limits.
func SimpleDeployment(ns, name string, replicas int32, requests corev1.ResourceList) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "app", Image: "registry.example/capscale/fake:1",
						Resources: corev1.ResourceRequirements{Requests: requests, Limits: requests},
					}},
				},
			},
		},
	}
}

// WaitForRunningPods waits until exactly want pods match selector and all are
// Running, and returns them.
func WaitForRunningPods(ctx context.Context, t *testing.T, p *plane.Plane, ns, selector string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := p.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		pods = list.Items
		if len(pods) != want {
			return false, nil
		}
		for _, pod := range pods {
			if pod.Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d Running pods %q in %s (have %d): %v", want, selector, ns, len(pods), err)
	}
	return pods
}
