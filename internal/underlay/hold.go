package underlay

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// When a deleted pod's IPs are back: the facts, from Kubernetes v1.37.2.
//
// A pod's node gives its IP back to the IPAM when the kubelet stops its
// sandbox (StopPodSandbox, which runs the CNI DEL), after it stopped the
// containers: pkg/kubelet/kuberuntime/kuberuntime_manager.go:2122-2134.
//
//   - Deleted gracefully, the kubelet deletes the object itself, and only
//     once the API shows it terminal (pkg/kubelet/status/status_manager.go:
//     1334-1351, canBeDeleted); it writes that terminal phase after the kill,
//     sandbox included (pkg/kubelet/kubelet.go:2377 kills, 2452 the terminal
//     status). A watcher sees the pod Succeeded or Failed first: its IP is
//     back, and the rule frees it at once (Holds).
//   - Deleted with grace 0 (`kubectl delete --grace-period=0 --force`, the
//     pod garbage collector, node deletion), the apiserver writes the pod
//     with deletionGracePeriodSeconds 0 and removes it at once
//     (k8s.io/apiserver pkg/registry/rest/delete.go:165,
//     pkg/registry/generic/registry/store.go:1165-1190), while the kubelet
//     still runs it. A watcher sees a pod that is not terminal disappear,
//     and its IP is held until the kubelet's kill, which it starts then,
//     reaches the sandbox.
//   - The kubelet kills such a pod with the grace the object says,
//     deletionGracePeriodSeconds, else spec.terminationGracePeriodSeconds,
//     at least 1 s (pkg/kubelet/pod_workers.go:1009-1040); a kill already
//     under way with a longer grace is cut to it (pod_workers.go:933). Each
//     container, preStop hook included, then gets at least 2 s
//     (kuberuntime/kuberuntime_manager.go:84, kuberuntime_container.go:908).
//
// A watch with a field selector (kube-scheduler's and capscale's informers
// keep only pods that are not terminal) reports a pod turning terminal as a
// delete carrying its previous object (k8s.io/apiserver
// pkg/storage/cacher/cache_watcher.go:400-408): that object is not terminal
// either, so the rule tells a force delete by deletionGracePeriodSeconds 0,
// which only a grace-0 delete writes before the object goes.

// MinKillGrace is the least the kubelet gives a container to stop
// (minimumGracePeriodInSeconds).
const MinKillGrace = 2 * time.Second

// TeardownAllowance is the time the rule allows, after the containers'
// grace, for the kubelet to notice the deletion and stop the sandbox (its
// CNI DEL): 0.1-2.5 s was measured on real nodes for the whole of it
// (issue 49), so 5 s leaves room for a loaded node.
const TeardownAllowance = 5 * time.Second

// DefaultTerminationGrace is the API's default
// spec.terminationGracePeriodSeconds.
const DefaultTerminationGrace = 30 * time.Second

// Deleted is what the rule reads of a pod that left a watch.
type Deleted struct {
	// Need is the pod's underlay IPs (PodNeed).
	Need int64
	// NodeName and Phase are the pod's, as last seen.
	NodeName string
	Phase    v1.PodPhase
	// DeletionGrace is metadata.deletionGracePeriodSeconds; nil when unset.
	DeletionGrace *int64
	// SpecGrace is spec.terminationGracePeriodSeconds; nil when unset.
	SpecGrace *int64
	// Tombstone is true when the informer missed the deletion and gives
	// the last object it had (cache.DeletedFinalStateUnknown).
	Tombstone bool
}

// DeletedPod is the Deleted of pod as a delete event carried it.
func DeletedPod(pod *v1.Pod, tombstone bool) Deleted {
	return Deleted{Need: PodNeed(pod), NodeName: pod.Spec.NodeName, Phase: pod.Status.Phase,
		DeletionGrace: pod.DeletionGracePeriodSeconds, SpecGrace: pod.Spec.TerminationGracePeriodSeconds, Tombstone: tombstone}
}

// HoldAfterDelete is how long the IPs of a pod that left the API stay
// charged to its node: 0 when they are back (it held none, had finished,
// or the kubelet finished it: a graceful deletion), else the grace the
// kubelet gives its kill plus TeardownAllowance. A force-deleted pod
// (deletionGracePeriodSeconds 0) is killed with 1 s, so its containers get
// MinKillGrace: its IPs are held 7 s. A tombstone, whose last state is
// unknown, is held for the grace its object says, as a force delete would
// be if the object were newer.
func HoldAfterDelete(d Deleted) time.Duration {
	if d.Need <= 0 || !Holds(d.NodeName, d.Phase) {
		return 0
	}
	switch {
	case d.DeletionGrace != nil && *d.DeletionGrace == 0:
		return MinKillGrace + TeardownAllowance
	case !d.Tombstone:
		// A graceful deletion the kubelet finished (the object went
		// terminal, seen through a filtered watch), or a pod that finished
		// on its own: the kubelet stopped it before it wrote the phase.
		return 0
	}
	grace := DefaultTerminationGrace
	switch {
	case d.DeletionGrace != nil:
		grace = time.Duration(*d.DeletionGrace) * time.Second
	case d.SpecGrace != nil:
		grace = time.Duration(*d.SpecGrace) * time.Second
	}
	return max(grace, MinKillGrace) + TeardownAllowance
}
