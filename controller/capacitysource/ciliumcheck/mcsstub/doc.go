// Package controllers stands in for sigs.k8s.io/mcs-api/controllers
// v0.5.2, which the Go module proxy does not serve (403). Cilium v1.20.2's
// operator links it only for one annotation name
// (pkg/clustermesh/mcsapi, operator/pkg/gateway-api/helpers), code the
// ENI IPAM check never runs; this module gives the name and nothing else.
package controllers

// DerivedServiceAnnotation is the annotation a ServiceImport names its
// derived Service by.
const DerivedServiceAnnotation = "multicluster.kubernetes.io/derived-service"
