//go:build tools

// Package tools pins what e2e/tools/build.sh builds for Kubernetes 1.35:
// the control plane, the kubelet and kube-proxy and, through the packages its main imports,
// capscale-scheduler (github.com/capscale/capscale/cmd/capscale-scheduler,
// a main package go mod tidy cannot see).
package tools

import (
	_ "k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"

	_ "github.com/capscale/capscale/schedplugin"
)
