package underlay

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TestRelease: the release finalizer stays while the pod's node may still

// t0 is when the pods of these tests were deleted.
var t0 = time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)

// force is a pod force-deleted at t0 on node, in phase, its node answering
// or not.
func force(node string, phase v1.PodPhase, ready bool) Releasing {
	return Releasing{Deleting: &t0, DeletionGrace: ptr.To[int64](0), NodeName: node, Phase: phase, NodeReady: ready}
}

// hold its IP, and never for good.
func TestRelease(t *testing.T) {
	graceEnd := t0.Add(30 * time.Second)
	for _, tc := range []struct {
		name      string
		r         Releasing
		at        time.Duration // after t0
		release   string
		wantAfter time.Duration
	}{
		{name: "force-deleted, running on a node that answers: held until the kubelet writes the phase", r: force("n", v1.PodRunning, true), at: time.Second, wantAfter: 6 * time.Second},
		{name: "force-deleted, past the hold on a node that answers: still held", r: force("n", v1.PodRunning, true), at: 10 * time.Second, wantAfter: 57 * time.Second},
		{name: "force-deleted, past the hold and MaxReleaseWait: released, never stuck", r: force("n", v1.PodRunning, true), at: 67 * time.Second, release: ReleaseWaitExceeded},
		{name: "force-deleted, the kubelet wrote Failed: its sandbox is stopped", r: force("n", v1.PodFailed, true), at: time.Second, release: ReleaseFinished},
		{name: "force-deleted, the kubelet wrote Succeeded", r: force("n", v1.PodSucceeded, true), release: ReleaseFinished},
		{name: "force-deleted on a node that does not answer: the other modes' 7 s", r: force("n", v1.PodRunning, false), at: 3 * time.Second, wantAfter: 4 * time.Second},
		{name: "force-deleted on a node that does not answer, hold over", r: force("n", v1.PodRunning, false), at: 7 * time.Second, release: ReleaseHoldOver},
		{name: "node gone: its IPs went with it", r: Releasing{Deleting: &t0, DeletionGrace: ptr.To[int64](0), NodeName: "n", Phase: v1.PodRunning, NodeGone: true}, release: ReleaseNodeGone},
		{name: "never bound", r: Releasing{Deleting: &t0, DeletionGrace: ptr.To[int64](0), Phase: v1.PodPending}, release: ReleaseUnbound},
		{name: "not deleted, pending: kept, it is bound next", r: Releasing{Phase: v1.PodPending}},
		{name: "not deleted, on a node that is gone: kept until the pod garbage collector deletes it", r: Releasing{NodeName: "n", Phase: v1.PodRunning, NodeGone: true}},
		{name: "not deleted, running: kept, nothing to look at", r: Releasing{NodeName: "n", Phase: v1.PodRunning, NodeReady: true}, at: time.Hour},
		{name: "not deleted, finished: nothing left to hold", r: Releasing{NodeName: "n", Phase: v1.PodSucceeded, NodeReady: true}, release: ReleaseFinished},
		{name: "graceful, in its grace: held past its end", r: Releasing{Deleting: &graceEnd, DeletionGrace: ptr.To[int64](30), NodeName: "n", Phase: v1.PodRunning, NodeReady: true},
			at: 10 * time.Second, wantAfter: 25 * time.Second},
		{name: "graceful, node does not answer: grace plus the teardown allowance", r: Releasing{Deleting: &graceEnd, DeletionGrace: ptr.To[int64](30), NodeName: "n", Phase: v1.PodRunning},
			at: 35 * time.Second, release: ReleaseHoldOver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, after := Release(tc.r, t0.Add(tc.at))
			if why != tc.release || after != tc.wantAfter {
				t.Errorf("Release = %q, look again after %v; want %q, %v", why, after, tc.release, tc.wantAfter)
			}
		})
	}
}

// TestCleanup: at uninstall the finalizer goes from every pod, a pod being
// deleted keeps it while Release would, and none keeps it past the
// cleanup's deadline.
func TestCleanup(t *testing.T) {
	deadline := t0.Add(90 * time.Second)
	for _, tc := range []struct {
		name      string
		r         Releasing
		at        time.Duration // after t0
		release   string
		wantAfter time.Duration
	}{
		{name: "running, not deleted: released now (Release keeps it)", r: Releasing{NodeName: "n", Phase: v1.PodRunning, NodeReady: true}, release: ReleaseUninstall},
		{name: "pending, not deleted: released now", r: Releasing{Phase: v1.PodPending}, release: ReleaseUninstall},
		{name: "finished, not deleted: Release's reason", r: Releasing{NodeName: "n", Phase: v1.PodSucceeded}, release: ReleaseFinished},
		{name: "force-deleted, in its hold: kept as Release keeps it", r: force("n", v1.PodRunning, true), at: time.Second, wantAfter: 6 * time.Second},
		{name: "force-deleted, the kubelet finished it: released", r: force("n", v1.PodFailed, true), at: time.Second, release: ReleaseFinished},
		{name: "force-deleted on a silent node, hold over: released", r: force("n", v1.PodRunning, false), at: 7 * time.Second, release: ReleaseHoldOver},
		{name: "force-deleted, MaxReleaseWait over: released", r: force("n", v1.PodRunning, true), at: 67 * time.Second, release: ReleaseWaitExceeded},
		{name: "graceful, its wait ends after the deadline: looked at again at the deadline", r: Releasing{Deleting: ptr.To(t0.Add(60 * time.Second)), DeletionGrace: ptr.To[int64](60), NodeName: "n", Phase: v1.PodRunning, NodeReady: true},
			at: 80 * time.Second, wantAfter: 10 * time.Second},
		{name: "graceful, at the deadline: released, never stuck after the uninstall", r: Releasing{Deleting: ptr.To(t0.Add(60 * time.Second)), DeletionGrace: ptr.To[int64](60), NodeName: "n", Phase: v1.PodRunning, NodeReady: true},
			at: 90 * time.Second, release: ReleaseDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, after := Cleanup(tc.r, t0.Add(tc.at), deadline)
			if why != tc.release || after != tc.wantAfter {
				t.Errorf("Cleanup = %q, %v; want %q, %v", why, after, tc.release, tc.wantAfter)
			}
		})
	}
}
