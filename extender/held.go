package extender

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/underlay"
)

// The IPs of force-deleted pods, which their node may still hold: a pod
// deleted with grace 0 leaves the API before the kubelet has stopped its
// sandbox and given its IP back (underlay.HoldAfterDelete). Without an
// IPAM report the ledger keeps charging them to the node until the hold
// ends; the Tracker ends it and tells Waiting.

// heldPod is one such pod.
type heldPod struct {
	holder
	// charge is what the pod took from its node's pool when the hold
	// began (holder.chargeOn: its need, plus its drawn on a draws-all
	// node), charged as held until the hold ends.
	charge int64
	until  time.Time
}

// HoldDeleted is DeletePod for a pod whose IPs its node may still hold for
// hold: the pod no longer counts as used, but its need stays charged to
// its node as held until EndHold (or Expire, past the hold). It returns the
// room freed, as DeletePod does: none on the pod's node.
func (l *Ledger) HoldDeleted(pod *CachedPod, hold time.Duration) int64 {
	l.forgetNeed(pod.UID)
	l.mu.Lock()
	defer l.mu.Unlock()
	held, reserved := l.placeOf(pod.UID)
	before := l.freeOf(held, reserved)
	l.dropReservationLocked(pod.UID)
	l.removePodLocked(pod.UID)
	if _, dup := l.held[pod.UID]; !dup && pod.NodeName != "" {
		if n := l.nodes[pod.NodeName]; n != nil && n.known {
			h := &heldPod{holder: holder{namespace: pod.Namespace, name: pod.Name, node: pod.NodeName, need: pod.Need,
				drawn: underlay.Drawn(pod.Need, pod.PodNetwork)}, until: l.clock.Now().Add(hold)}
			if h.charge = h.chargeOn(n); h.charge > 0 {
				l.held[pod.UID] = h
				n.held += h.charge
			}
		}
	}
	return freed(before, l.freeOf(held, reserved))
}

// EndHold ends uid's hold, returning its node and the room freed there.
func (l *Ledger) EndHold(uid types.UID) (node string, room int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[uid]
	if h == nil {
		return "", 0
	}
	before := l.freeLocked(h.node)
	l.endHoldLocked(uid, h)
	return h.node, freed(before, l.freeLocked(h.node))
}

// endHoldLocked takes h off its node; callers hold mu.
func (l *Ledger) endHoldLocked(uid types.UID, h *heldPod) {
	delete(l.held, uid)
	l.node(h.node).held -= h.charge
	l.gc(h.node)
}

// dropHoldsLocked ends the holds on a deleted node: its pods' IPs went
// with it. Callers hold mu.
func (l *Ledger) dropHoldsLocked(node string) {
	for uid, h := range l.held {
		if h.node == node {
			l.endHoldLocked(uid, h)
		}
	}
}

// expireHoldsLocked ends the holds past their time, a backstop for a
// Tracker timer that did not run; callers hold mu.
func (l *Ledger) expireHoldsLocked(now time.Time) (room int64) {
	for uid, h := range l.held {
		if now.After(h.until) {
			before := l.freeLocked(h.node)
			l.endHoldLocked(uid, h)
			room += freed(before, l.freeLocked(h.node))
		}
	}
	return room
}

// reportHeldLocked lists the held pods in rep; callers hold mu.
func (l *Ledger) reportHeldLocked(rep *Report, index map[string]int) {
	for uid, h := range l.held {
		i, ok := index[h.node]
		if !ok {
			continue
		}
		nr := &rep.Nodes[i]
		nr.Pods = append(nr.Pods, PodIPs{Namespace: h.namespace, Name: h.name, UID: uid, IPs: h.charge, State: "held"})
	}
}

// ipamUsed is the report's figure for /capacity, nil when none.
func ipamUsed(r underlay.IPAMReport) *int64 {
	if !r.Reported {
		return nil
	}
	v := r.Used
	return &v
}

// beyondPods says, for an exhausted node's reason, what is charged beyond
// the pods (underlay.BeyondPods).
func (u NodeUsage) beyondPods() string {
	return underlay.BeyondPods(u.charges(), u.IPAM)
}

// holdAfterDelete is how long a deleted pod's IPs stay charged. Its need
// is its charge on a draws-all node (a pod-network pod that asks for none
// holds one there); HoldDeleted charges what it takes on its own node.
func holdAfterDelete(pod *CachedPod, tombstone bool) time.Duration {
	return underlay.HoldAfterDelete(underlay.Deleted{Need: underlay.Charge(pod.Need, pod.PodNetwork, true), NodeName: pod.NodeName, Phase: pod.Phase,
		DeletionGrace: pod.DeletionGracePeriodSeconds, SpecGrace: pod.TerminationGrace, Tombstone: tombstone})
}

// deleted applies a pod deletion: a hold when its node may still hold its
// IPs, ended by a timer that tells Waiting and UsageChanged.
func (t *Tracker) deleted(pod *CachedPod, tombstone bool) {
	hold := holdAfterDelete(pod, tombstone)
	if hold <= 0 {
		t.DeletePod(pod.UID)
		return
	}
	t.Waiting.Freed(t.Ledger.HoldDeleted(pod, hold))
	t.Waiting.Forget(pod.UID)
	klog.V(2).InfoS("Holding the underlay IPs of a force-deleted pod until its node can have released them",
		"pod", klog.KObj(pod), "node", pod.NodeName, "need", pod.Need, "hold", hold)
	after := t.after
	if after == nil {
		after = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	uid := pod.UID
	after(hold, func() {
		node, room := t.Ledger.EndHold(uid)
		t.Waiting.FreedOn(node, room)
		if node != "" && t.UsageChanged != nil {
			t.UsageChanged(node)
		}
	})
}
