// Package v1alpha1 holds the capscale.io/v1alpha1 API types: ElasticWeb, an
// image, a port and two QPS figures that capscale's controller turns into a
// Deployment, a Service and an HPA. The CRD that serves them is
// deploy/crd/elasticwebs.yaml; a unit test keeps the two in step.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of capscale's custom resources.
const GroupName = "capscale.io"

// SchemeGroupVersion is the group and version of this package's types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// ElasticWebResource is the resource the CRD serves.
var ElasticWebResource = SchemeGroupVersion.WithResource("elasticwebs")

// ElasticWebKind is the kind of an ElasticWeb.
const ElasticWebKind = "ElasticWeb"

var (
	// SchemeBuilder registers this package's types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &ElasticWeb{}, &ElasticWebList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
