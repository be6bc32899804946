//go:build !k8s_1_35

package schedplugin

import fwk "k8s.io/kube-scheduler/framework"

// The framework's score bounds; 1.35 names them MaxNodeScore and
// MinNodeScore (score_135.go, build tag k8s_1_35).
const (
	maxScore = fwk.MaxScore
	minScore = fwk.MinScore
)
