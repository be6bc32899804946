package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ElasticWeb is a web service sized by QPS: capscale keeps a Deployment, a
// Service and a HorizontalPodAutoscaler of the same name in shape, and the
// HPA follows ceil(totalQPS / singlePodQPS) through capscale's metrics adapter.
type ElasticWeb struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ElasticWebSpec   `json:"spec"`
	Status ElasticWebStatus `json:"status,omitempty"`
}

// ElasticWebSpec is what the user asks for.
type ElasticWebSpec struct {
	// Image is the container image to run.
	Image string `json:"image"`
	// Port is the container port the web server listens on; the Service
	// exposes it as a NodePort.
	Port int32 `json:"port"`
	// SinglePodQPS is the QPS one pod serves, greater than 0.
	SinglePodQPS float64 `json:"singlePodQPS"`
	// TotalQPS is the QPS the service must serve, at least 0.
	TotalQPS float64 `json:"totalQPS"`
	// MinReplicas is the HPA's lower bound; default 1 (0 needs the
	// HPAScaleToZero feature gate).
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// MaxReplicas is the HPA's upper bound; default max(10, 2 ×
	// ceil(totalQPS / singlePodQPS)).
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`
	// Resources are the web container's requests and limits.
	Resources *ContainerResources `json:"resources,omitempty"`
}

// ContainerResources are a container's compute requests and limits.
type ContainerResources struct {
	// Requests are what the scheduler reserves for the container.
	Requests corev1.ResourceList `json:"requests,omitempty"`
	// Limits are the most the container may use.
	Limits corev1.ResourceList `json:"limits,omitempty"`
}

// ElasticWebStatus is what the controller observed.
type ElasticWebStatus struct {
	// ObservedGeneration is the generation this status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// QPSReplicas is ceil(totalQPS / singlePodQPS), computed exactly as the
	// metrics adapter does.
	QPSReplicas int32 `json:"qpsReplicas"`
	// DesiredReplicas is the Deployment's spec.replicas, as the HPA set it.
	DesiredReplicas int32 `json:"desiredReplicas"`
	// ReadyReplicas is the Deployment's ready replica count.
	ReadyReplicas int32 `json:"readyReplicas"`
	// RealQPS is readyReplicas × singlePodQPS: the QPS served now.
	RealQPS float64 `json:"realQPS"`
	// NodePort is the Service's node port.
	NodePort int32 `json:"nodePort,omitempty"`
	// Conditions are Reconciled (the objects match the spec) and Ready
	// (enough replicas are ready for totalQPS).
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ElasticWebList is a list of ElasticWebs.
type ElasticWebList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []ElasticWeb `json:"items"`
}

// Condition types and reasons of an ElasticWeb.
const (
	// ConditionReconciled is True when the Deployment, Service and HPA
	// match the spec.
	ConditionReconciled = "Reconciled"
	// ConditionReady is True when enough replicas are ready for totalQPS.
	ConditionReady = "Ready"

	// ReasonApplied: every object matches the spec.
	ReasonApplied = "Applied"
	// ReasonObjectConflict: an object of the same name exists that this
	// ElasticWeb did not create; capscale leaves it alone.
	ReasonObjectConflict = "ObjectConflict"
	// ReasonInvalidSpec: the spec cannot be turned into objects.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonApplyFailed: the apiserver refused an apply.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonEnoughReplicas: ready replicas serve totalQPS (within maxReplicas).
	ReasonEnoughReplicas = "EnoughReplicas"
	// ReasonScaling: fewer replicas are ready than totalQPS needs.
	ReasonScaling = "Scaling"
)
