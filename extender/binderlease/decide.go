// Package binderlease keeps one group of extenders at a time binding
// underlay pods. Each extender re-checks capacity against its own ledger
// only, so two extenders binding at once (one beside a dedicated
// capscale-scheduler, one beside the cluster's default scheduler) could
// each place a pod into the same last free IP. Before it binds, an
// extender must hold the Lease capscale-underlay-binder for its binder ID;
// the replicas of one scheduler share an ID (their kube-scheduler's own
// leader election already makes them take turns), a second scheduler's
// extender has another ID and refuses every bind, loudly, until the first
// group has been gone for a lease duration.
//
// Decide is the plain decision over a Lease; Lease is the loop around it.
package binderlease

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Name is the Lease the binders of one cluster share.
const Name = "capscale-underlay-binder"

// Action is what Decide asks the loop to write.
type Action int

const (
	// Wait: another ID holds a live lease; write nothing.
	Wait Action = iota
	// Create: there is no lease yet.
	Create
	// Renew: the lease is ours; refresh renewTime.
	Renew
	// TakeOver: the lease is free or expired; make it ours.
	TakeOver
)

// Observed is what the loop last saw of someone else's lease, measured on
// the local clock: the record (its resourceVersion and renewTime) and when
// it first saw it.
// Expiry is judged by how long a record has not changed here, never by the
// renewTime another machine's clock wrote (client-go's leader election does
// the same).
type Observed struct {
	Record string
	Since  time.Time
}

// recordOf identifies one write of a lease.
func recordOf(l *coordinationv1.Lease) string {
	r := l.ResourceVersion + "/"
	if l.Spec.RenewTime != nil {
		r += l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	return r
}

// Decision is Decide's answer.
type Decision struct {
	Action Action
	// Holder is the lease's holder when Action is Wait.
	Holder string
	// Observed is what to remember for the next call.
	Observed Observed
}

// Decide says what a binder with id does about cur (nil: no lease) at now,
// given what it observed before and the lease duration.
func Decide(cur *coordinationv1.Lease, id string, prev Observed, now time.Time, duration time.Duration) Decision {
	if cur == nil {
		return Decision{Action: Create}
	}
	holder := ""
	if cur.Spec.HolderIdentity != nil {
		holder = *cur.Spec.HolderIdentity
	}
	if holder == id {
		return Decision{Action: Renew}
	}
	if holder == "" {
		return Decision{Action: TakeOver}
	}
	obs := prev
	if rec := recordOf(cur); obs.Record != rec || obs.Since.IsZero() {
		obs = Observed{Record: rec, Since: now}
	}
	if now.Sub(obs.Since) >= duration {
		return Decision{Action: TakeOver}
	}
	return Decision{Action: Wait, Holder: holder, Observed: obs}
}

// Apply returns cur (or a new Lease in namespace) changed as d says, for id.
func Apply(cur *coordinationv1.Lease, namespace, id string, d Decision, now time.Time, duration time.Duration) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: Name}}
	if cur != nil {
		l = cur.DeepCopy()
	}
	t := metav1.NewMicroTime(now)
	secs := int32(duration / time.Second)
	l.Spec.RenewTime = &t
	l.Spec.LeaseDurationSeconds = &secs
	if d.Action == Create || d.Action == TakeOver {
		holder := id
		l.Spec.HolderIdentity = &holder
		l.Spec.AcquireTime = &t
		if d.Action == TakeOver {
			n := int32(1)
			if l.Spec.LeaseTransitions != nil {
				n = *l.Spec.LeaseTransitions + 1
			}
			l.Spec.LeaseTransitions = &n
		}
	}
	return l
}
