package elasticweb

import (
	"math"
	"strconv"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/internal/names"
)

// ContainerName is the name of the web container in the pod template.
const ContainerName = "web"

// Defaults of the optional bounds.
const (
	defaultMinReplicas = 1
	// maxReplicas defaults to twice what the QPS asks for, at least this.
	defaultMaxReplicasFloor = 10
)

// Labels are the labels of every object of the ElasticWeb name, and of its pods.
func Labels(name string) map[string]string {
	return map[string]string{
		names.ElasticWebLabel:          name,
		"app.kubernetes.io/name":       name,
		"app.kubernetes.io/managed-by": names.FieldManager,
	}
}

// formatQPS writes a QPS the way the adapter reads it back: the shortest
// decimal that is exactly this float64, so 0.1 stays "0.1" (1/10 to the
// adapter's big.Rat), not 0.1000000000000000055....
func formatQPS(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// QPSAnnotations are the Deployment annotations the adapter's QPS policy reads.
func QPSAnnotations(spec *v1alpha1.ElasticWebSpec) map[string]string {
	return map[string]string{
		names.SinglePodQPSAnnotation: formatQPS(spec.SinglePodQPS),
		names.TotalQPSAnnotation:     formatQPS(spec.TotalQPS),
	}
}

// Bounds returns the HPA's min and max replicas: the spec's, or the defaults
// (1, and max(10, 2 × qpsReplicas)). qpsReplicas is ceil(total / single).
func Bounds(spec *v1alpha1.ElasticWebSpec, qpsReplicas int32) (int32, int32) {
	minR := int32(defaultMinReplicas)
	if spec.MinReplicas != nil {
		minR = *spec.MinReplicas
	}
	maxR := int32(defaultMaxReplicasFloor)
	if qpsReplicas <= math.MaxInt32/2 && 2*qpsReplicas > maxR {
		maxR = 2 * qpsReplicas
	}
	if spec.MaxReplicas != nil {
		maxR = *spec.MaxReplicas
	}
	// The CRD refuses max < min; an object stored before that rule (or
	// written around it) still gets a valid HPA.
	if maxR < minR {
		maxR = minR
	}
	if maxR < 1 {
		maxR = 1
	}
	return minR, maxR
}

func ownerReference(ew *v1alpha1.ElasticWeb) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(v1alpha1.SchemeGroupVersion.String()).
		WithKind(v1alpha1.ElasticWebKind).
		WithName(ew.Name).
		WithUID(ew.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}

// desiredDeployment is the Deployment of ew. Replicas are left out on
// purpose: the HPA owns them, and an apply that set them would fight it.
func desiredDeployment(ew *v1alpha1.ElasticWeb) *appsv1ac.DeploymentApplyConfiguration {
	lbls := Labels(ew.Name)
	port := ew.Spec.Port
	c := corev1ac.Container().
		WithName(ContainerName).
		WithImage(ew.Spec.Image).
		WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(port).WithProtocol(corev1.ProtocolTCP)).
		WithReadinessProbe(corev1ac.Probe().
			WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromInt32(port))).
			WithPeriodSeconds(5))
	if r := ew.Spec.Resources; r != nil && (len(r.Requests) > 0 || len(r.Limits) > 0) {
		rr := corev1ac.ResourceRequirements()
		if len(r.Requests) > 0 {
			rr.WithRequests(r.Requests.DeepCopy())
		}
		if len(r.Limits) > 0 {
			rr.WithLimits(r.Limits.DeepCopy())
		}
		c.WithResources(rr)
	}
	return appsv1ac.Deployment(ew.Name, ew.Namespace).
		WithLabels(lbls).
		WithAnnotations(QPSAnnotations(&ew.Spec)).
		WithOwnerReferences(ownerReference(ew)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{names.ElasticWebLabel: ew.Name})).
			WithStrategy(appsv1ac.DeploymentStrategy().WithType("RollingUpdate").
				WithRollingUpdate(appsv1ac.RollingUpdateDeployment().
					WithMaxUnavailable(intstr.FromInt32(0)).WithMaxSurge(intstr.FromString("25%")))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(lbls).
				WithSpec(corev1ac.PodSpec().WithContainers(c))))
}

// desiredService exposes the port on every node (NodePort); the node port
// itself is the apiserver's choice.
func desiredService(ew *v1alpha1.ElasticWeb) *corev1ac.ServiceApplyConfiguration {
	port := ew.Spec.Port
	return corev1ac.Service(ew.Name, ew.Namespace).
		WithLabels(Labels(ew.Name)).
		WithOwnerReferences(ownerReference(ew)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeNodePort).
			WithSelector(map[string]string{names.ElasticWebLabel: ew.Name}).
			WithPorts(corev1ac.ServicePort().WithName("http").WithProtocol(corev1.ProtocolTCP).
				WithPort(port).WithTargetPort(intstr.FromInt32(port))))
}

// desiredHPA targets capscale-desired-replicas with policy=qps: the adapter
// stays the one place that computes the count, from the Deployment's
// annotations.
func desiredHPA(ew *v1alpha1.ElasticWeb, minR, maxR int32) *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration {
	zero := resource.MustParse("0")
	return autoscalingv2ac.HorizontalPodAutoscaler(ew.Name, ew.Namespace).
		WithLabels(Labels(ew.Name)).
		WithOwnerReferences(ownerReference(ew)).
		WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().
			WithScaleTargetRef(autoscalingv2ac.CrossVersionObjectReference().
				WithAPIVersion("apps/v1").WithKind("Deployment").WithName(ew.Name)).
			WithMinReplicas(minR).
			WithMaxReplicas(maxR).
			WithMetrics(autoscalingv2ac.MetricSpec().
				WithType(autoscalingv2.ExternalMetricSourceType).
				WithExternal(autoscalingv2ac.ExternalMetricSource().
					WithMetric(autoscalingv2ac.MetricIdentifier().
						WithName(names.DesiredReplicasMetric).
						WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{
							"workload": ew.Name, "policy": names.PolicyQPS,
						}))).
					WithTarget(autoscalingv2ac.MetricTarget().
						WithType(autoscalingv2.AverageValueMetricType).
						WithAverageValue(resource.MustParse("1"))))).
			// The metric is already a replica count: with the default ±10%
			// tolerance the HPA would ignore 20 → 21.
			WithBehavior(autoscalingv2ac.HorizontalPodAutoscalerBehavior().
				WithScaleUp(autoscalingv2ac.HPAScalingRules().WithTolerance(zero)).
				WithScaleDown(autoscalingv2ac.HPAScalingRules().WithTolerance(zero))))
}
