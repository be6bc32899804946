//go:build !k8s_1_35 && !k8s_1_36

package schedplugin

import fwk "k8s.io/kube-scheduler/framework"

// assignedPod is the event resource of a bound pod's deletion. Since 1.37
// the framework tells bound pods apart; capscale-scheduler for an older
// minor is built with the tag k8s_1_MINOR (e2e/tools/k8s-1.MINOR), where
// this is fwk.Pod (events_pre137.go).
const assignedPod = fwk.AssignedPod
