//go:build k8s_1_35 || k8s_1_36

package schedplugin

import fwk "k8s.io/kube-scheduler/framework"

// assignedPod: before 1.37 the framework has one pod resource for every
// pod's events; the hint itself ignores pods that were never bound.
const assignedPod = fwk.Pod
