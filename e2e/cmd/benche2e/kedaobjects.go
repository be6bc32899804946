package main

import (
	"context"
	"fmt"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/internal/names"
)

// The objects the keda scenario creates: N Deployments, and for each
// either an HPA on capscale's APIService or a ScaledObject on its scaler,
// asking for the same metric with the same target and behaviour.

func deploymentName(i int) string { return fmt.Sprintf("w-%04d", i) }

func benchDeployment(i int) *appsv1.Deployment {
	labels := map[string]string{"app": deploymentName(i)}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: deploymentName(i), Namespace: kedaNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}},
		},
	}
}

// zeroStabilization: scale at once both ways, so the time measured is the
// pipeline's, not a window's.
func zeroStabilization() *autoscalingv2.HorizontalPodAutoscalerBehavior {
	return &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp:   &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32(0))},
		ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32(0))},
	}
}

// benchHPA reads capscale's load index through the aggregator.
func benchHPA(i int) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: deploymentName(i), Namespace: kedaNS},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: deploymentName(i)},
			MinReplicas:    ptr.To(int32(1)), MaxReplicas: 10,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: names.LoadIndexMetric, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"source": "load"}}},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewQuantity(1, resource.DecimalSI)},
			}}},
			Behavior: zeroStabilization(),
		},
	}
}

// benchScaledObject asks capscale's scaler for the same metric, target and
// behaviour as benchHPA, through KEDA.
func benchScaledObject(i int, scalerAddr string, polling time.Duration) *unstructured.Unstructured {
	zero := map[string]any{"stabilizationWindowSeconds": int64(0)}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": deploymentName(i), "namespace": kedaNS},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": deploymentName(i)},
			"pollingInterval": int64(polling / time.Second),
			"minReplicaCount": int64(1), "maxReplicaCount": int64(10),
			"advanced": map[string]any{"horizontalPodAutoscalerConfig": map[string]any{
				"behavior": map[string]any{"scaleUp": zero, "scaleDown": zero},
			}},
			"triggers": []any{map[string]any{
				"type": "external",
				"metadata": map[string]any{"scalerAddress": scalerAddr, "metric": names.LoadIndexMetric,
					"source": "load", "targetValue": "1"},
				"authenticationRef": map[string]any{"name": scalerAuthName},
			}},
		},
	}}
}

// scalerAuth creates the Secret and TriggerAuthentication KEDA dials the
// scaler with: the cluster CA, which signed the adapter's serving
// certificate, and a client certificate of the front-proxy CA, which the
// adapter was told to trust.
func (r *kedaRig) scalerAuth(ctx context.Context) error {
	pair, err := r.s.PKI.FrontProxy.Issue(r.dir, "keda-operator", plane.CertSpec{CommonName: "keda-operator", Client: true})
	if err != nil {
		return err
	}
	data := map[string][]byte{}
	for key, file := range map[string]string{"caCert": r.s.PKI.ClusterCA.CertFile, "tlsClientCert": pair.CertFile, "tlsClientKey": pair.KeyFile} {
		if data[key], err = os.ReadFile(file); err != nil {
			return err
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: scalerAuthName + "-tls", Namespace: kedaNS}, Data: data}
	if _, err := r.cs.CoreV1().Secrets(kedaNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the scaler's TLS Secret: %w", err)
	}
	var refs []any
	for _, key := range []string{"caCert", "tlsClientCert", "tlsClientKey"} {
		refs = append(refs, map[string]any{"parameter": key, "name": secret.Name, "key": key})
	}
	auth := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
		"metadata": map[string]any{"name": scalerAuthName, "namespace": kedaNS},
		"spec":     map[string]any{"secretTargetRef": refs},
	}}
	if _, err := r.dyn.Resource(triggerAuthGVR).Namespace(kedaNS).Create(ctx, auth, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the TriggerAuthentication: %w", err)
	}
	return nil
}
