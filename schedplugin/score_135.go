//go:build k8s_1_35

package schedplugin

import fwk "k8s.io/kube-scheduler/framework"

// The framework's score bounds under their 1.35 names.
const (
	maxScore = fwk.MaxNodeScore
	minScore = fwk.MinNodeScore
)
