package underlay

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// Native mode's answer to a force delete (docs/failure-and-recovery.md "When is an
// IP free again"). kube-scheduler counts a pod's requests while the object
// exists and is not terminal, whatever its deletionTimestamp; a pod with a
// finalizer that is deleted with grace 0 is only marked (deletionTimestamp
// now, deletionGracePeriodSeconds 0) and stays until its last finalizer is
// removed (k8s.io/apiserver v0.37.2 pkg/registry/rest/delete.go:159-166,
// pkg/registry/generic/registry/store.go:1175-1178 and ShouldDeleteDuringUpdate
// :633-653). So capscale's finalizer keeps the IPs counted until its node gave
// them back, and the kubelet itself says when: it writes the terminal phase
// only after its kill stopped the sandbox (k8s.io/kubernetes v1.37.2
// pkg/kubelet/kubelet.go:2377 kills, a kill whose StopPodSandbox failed
// returns an error, kuberuntime/kuberuntime_manager.go:2128-2134, and :2452
// writes the terminal status).

// MaxReleaseWait is how long past its hold (HoldAfterDelete) a pod on a
// node that answers keeps the finalizer when its kubelet never writes the
// terminal phase (a CNI DEL that keeps failing, a kubelet that lost the
// pod): the finalizer must not defeat a force delete for good.
const MaxReleaseWait = time.Minute

// Releasing is what the rule reads of a pod that carries the release
// finalizer, and of its node.
type Releasing struct {
	// Deleting is metadata.deletionTimestamp: for a grace-0 delete the
	// delete's time, else the end of the grace. Nil while not deleted.
	Deleting *time.Time
	// DeletionGrace is metadata.deletionGracePeriodSeconds.
	DeletionGrace *int64
	NodeName      string
	Phase         v1.PodPhase
	// NodeGone is true when the pod's node is not in the API: its IPs went
	// with it (the pod garbage collector deletes such pods with grace 0).
	NodeGone bool
	// NodeReady is the node's Ready condition is True: its kubelet answers,
	// and will write the pod's terminal phase once it stopped the sandbox.
	NodeReady bool
}

// Why Release lets the finalizer go (a metric label).
const (
	ReleaseFinished     = "finished"      // terminal phase: the kubelet stopped the sandbox
	ReleaseUnbound      = "unbound"       // never bound: no node holds an IP for it
	ReleaseNodeGone     = "node_gone"     // the node left the API, its IPs with it
	ReleaseHoldOver     = "hold_over"     // the node does not answer; the hold ended
	ReleaseWaitExceeded = "wait_exceeded" // the node answers but never finished the pod
)

// Release returns why the finalizer may go now, "" to keep it; after is
// then when to look again (0: at the next change of the pod or its node).
//
// It goes at once when the pod finished (the kubelet stopped its sandbox
// before it wrote the phase); else a pod that is not being deleted keeps
// it. A pod being deleted lets it go at once if it was never bound or its
// node is gone. A pod
// being deleted on a node whose kubelet does not answer keeps it for the
// hold the other modes charge (HoldAfterDelete, 7 s for grace 0, counted
// from the delete), since nothing tells when that node lets the IP go; on a
// node that answers it waits for the terminal phase, MaxReleaseWait longer
// at most.
func Release(r Releasing, now time.Time) (why string, after time.Duration) {
	switch {
	case r.Phase == v1.PodSucceeded || r.Phase == v1.PodFailed:
		return ReleaseFinished, 0
	case r.Deleting == nil:
		// A pending pod keeps it too: it is bound next.
		return "", 0
	case r.NodeName == "":
		return ReleaseUnbound, 0
	case r.NodeGone:
		return ReleaseNodeGone, 0
	}
	held := HeldUntil(r)
	deadline, why := held, ReleaseHoldOver
	if r.NodeReady {
		deadline, why = held.Add(MaxReleaseWait), ReleaseWaitExceeded
	}
	switch {
	case !now.Before(deadline):
		return why, 0
	case now.Before(held):
		// Look again when the hold ends, in case the node stops answering.
		return "", held.Sub(now)
	}
	return "", deadline.Sub(now)
}

// HeldUntil is when the hold of a pod being deleted ends (the time is zero
// for one that is not): after it, whether its node answers decides.
func HeldUntil(r Releasing) time.Time {
	if r.Deleting == nil {
		return time.Time{}
	}
	grace := int64(0)
	if r.DeletionGrace != nil {
		grace = max(*r.DeletionGrace, 0)
	}
	// deletionTimestamp is the delete's time plus its grace.
	deleted := r.Deleting.Add(-time.Duration(grace) * time.Second)
	return deleted.Add(HoldAfterDelete(Deleted{Need: 1, NodeName: r.NodeName, Phase: r.Phase, DeletionGrace: &grace, Tombstone: true}))
}

// Why Cleanup lets the finalizer go when capscale is uninstalled (a
// metric label beside Release's).
const (
	ReleaseUninstall = "uninstall"          // not being deleted: nothing holds its IPs back yet
	ReleaseDeadline  = "uninstall_deadline" // being deleted, and the cleanup's time is up
)

// Cleanup is Release for the uninstall (`extender release-cleanup`): after
// it nothing removes the finalizer, and a pod that keeps it hangs
// Terminating for good, with its namespace. A pod not being deleted lets
// it go at once (a later force delete meets the race the finalizer guards
// against, as without capscale); a pod being deleted keeps it as long as
// Release says, but only until deadline, the end of the cleanup: a
// finalizer left for good is worse than one sandbox retry. after is when
// to look again, never past deadline.
func Cleanup(r Releasing, now, deadline time.Time) (why string, after time.Duration) {
	why, after = Release(r, now)
	switch {
	case why != "":
		return why, 0
	case r.Deleting == nil:
		return ReleaseUninstall, 0
	case !now.Before(deadline):
		return ReleaseDeadline, 0
	case after == 0 || after > deadline.Sub(now):
		return "", deadline.Sub(now)
	}
	return "", after
}
