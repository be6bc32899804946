package extender

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// A reservation whose Binding succeeded normally ends within milliseconds,
// when the pod informer delivers the bound pod. The informer watches bound,
// non-terminal pods only, so when its watch is down while the pod is bound
// and then deleted (or finishes), and the watch comes back through a relist,
// the informer never cached the pod and no event ends the reservation: its
// IPs would stay reserved until the extender restarts.
//
// A TTL alone would be wrong: a pod bound and running while the watch lags
// still uses its IPs, and dropping them over-commits the node. A relist does
// not help either: it produces no event for a key the informer never held.
// So a confirmed reservation the informer has not settled within a grace
// period is checked against the apiserver (Reconciler, one GET per pod):
// the ledger lists those reservations and applies the verdicts, without I/O.
//
// A reservation whose Binding outcome is unknown (a timeout, or
// kube-scheduler hanging up mid-bind) is checked the same way: its pod may
// have been deleted while pending, which the informer of bound pods never
// sees, and without the check its IPs stayed reserved for the whole TTL
// (the soak found pods waiting behind such reservations for a minute).
// Only a pod still pending keeps it to the TTL: its Binding may yet land.

// StaleReservation is a confirmed reservation the informer has not settled.
type StaleReservation struct {
	UID             types.UID
	Namespace, Name string
	Node            string
	// Token identifies the reservation, so that a verdict never ends a
	// newer reservation of the same pod.
	Token uint64
	// Unconfirmed: the Binding's outcome is unknown, rather than known to
	// have succeeded.
	Unconfirmed bool
}

// Confirmed marks the reservation identified by token as bound: its Binding
// succeeded (or an earlier one was found to have landed). The informer
// normally ends it soon; if not, StaleConfirmed lists it after a grace.
func (l *Ledger) Confirmed(uid types.UID, token uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.reservations[uid]; r != nil && r.token == token {
		r.confirmed, r.expires = l.clock.Now(), time.Time{}
	}
}

// Stale returns at most limit reservations, confirmed or with an unknown
// outcome, that the informer has not settled for grace since then or since
// they were last found still holding, least recently looked at first.
// Reservations in flight are never listed: the binder settles those.
func (l *Ledger) Stale(grace time.Duration, limit int) []StaleReservation {
	now := l.clock.Now()
	type aged struct {
		s    StaleReservation
		last time.Time
	}
	var stale []aged
	l.mu.RLock()
	for uid, r := range l.reservations {
		if r.confirmed.IsZero() && r.unconfirmed.IsZero() {
			continue
		}
		last := r.confirmed
		if r.confirmed.IsZero() {
			last = r.unconfirmed
		}
		if r.checked.After(last) {
			last = r.checked
		}
		if now.Sub(last) < grace {
			continue
		}
		stale = append(stale, aged{StaleReservation{UID: uid, Namespace: r.namespace, Name: r.name, Node: r.node, Token: r.token,
			Unconfirmed: r.confirmed.IsZero()}, last})
	}
	l.mu.RUnlock()
	sort.Slice(stale, func(i, j int) bool {
		if !stale[i].last.Equal(stale[j].last) {
			return stale[i].last.Before(stale[j].last)
		}
		return stale[i].s.UID < stale[j].s.UID
	})
	out := make([]StaleReservation, 0, min(len(stale), limit))
	for _, a := range stale {
		if len(out) == limit {
			break
		}
		out = append(out, a.s)
	}
	return out
}

// DropStale ends a stale reservation whose pod is no longer on its node,
// reports whether it did and returns the room that freed; a reservation
// replaced or settled since it was listed (another token, or none) is left
// alone.
func (l *Ledger) DropStale(s StaleReservation) (bool, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reservations[s.UID]
	if r == nil || r.token != s.Token {
		return false, 0
	}
	before := l.freeLocked(r.node)
	l.dropReservationLocked(s.UID)
	return true, freed(before, l.freeLocked(r.node))
}

// KeepStale records that a stale reservation's pod was found still bound
// to its node (or could not be read): it is looked at again after a grace.
func (l *Ledger) KeepStale(s StaleReservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.reservations[s.UID]; r != nil && r.token == s.Token {
		r.checked = l.clock.Now()
	}
}

// Results of reconciling a stale reservation, the result label of
// capscale_extender_reservations_reconciled_total.
const (
	reconcileGone       = "gone"        // the pod was deleted
	reconcileRecreated  = "recreated"   // a pod of the same name has another UID
	reconcileTerminal   = "terminal"    // the pod finished
	reconcileNotOnNode  = "not_on_node" // the pod is not bound to the node
	reconcileBound      = "bound"       // kept: the pod runs on the node
	reconcilePending    = "pending"     // kept: an unknown Binding may yet land
	reconcileReadFailed = "error"       // kept: the pod could not be read
)

// reconcileVerdict decides a stale reservation from a GET of its pod (pod,
// or err when the GET failed): result says why, and drop whether the
// reservation's IPs are free again. Only a pod still bound to the node and
// not finished keeps them, and so does a failed read: dropping the IPs of a
// pod that runs would over-commit the node, keeping them a while longer
// only delays another pod.
func reconcileVerdict(s StaleReservation, pod *v1.Pod, err error) (result string, drop bool) {
	switch {
	case apierrors.IsNotFound(err):
		return reconcileGone, true
	case err != nil || pod == nil:
		return reconcileReadFailed, false
	case pod.UID != s.UID:
		return reconcileRecreated, true
	case pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed:
		return reconcileTerminal, true
	case s.Unconfirmed && pod.Spec.NodeName == "":
		return reconcilePending, false
	case pod.Spec.NodeName != s.Node:
		return reconcileNotOnNode, true
	}
	return reconcileBound, false
}

// logStale logs a reconciled reservation.
func logStale(s StaleReservation, result string, drop bool, err error) {
	pod := klog.KRef(s.Namespace, s.Name)
	switch {
	case drop:
		klog.InfoS("Dropping the underlay IP reservation of a pod no longer on its node", "pod", pod, "uid", s.UID, "node", s.Node, "result", result)
	case err != nil:
		klog.V(2).InfoS("Could not read the pod of a stale underlay IP reservation, keeping it", "pod", pod, "node", s.Node, "err", err)
	default:
		klog.V(4).InfoS("Pod of a stale underlay IP reservation is still bound, keeping it", "pod", pod, "node", s.Node)
	}
}
