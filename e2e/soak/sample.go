// Package soak is the soak scenario of `make bench-e2e` (issue 30): steady
// churn and scheduled faults on a real local plane, sampled every second,
// with an invariant checker that says, for every sample, whether
// capscale's view ever drifted from the cluster's.
//
// The checker (check.go) and the growth fit (growth.go) are plain
// functions over the plain Sample below, unit-tested on recorded samples;
// the sampler, the churn and the faults (run.go, churn.go) are the I/O
// that feeds them.
package soak

import "time"

// Node is one node as the apiserver shows it, and capscale's view of it.
type Node struct {
	Name string `json:"name"`
	// Capacity is the node's underlay-IP capacity by internal/underlay's
	// rule, from its Node object.
	Capacity int64 `json:"capacity"`
	// Invalid: the node's capacity value is invalid (Capacity 0); native
	// mode then publishes the IPs in use, so that no new pod fits and no
	// running one is evicted.
	Invalid bool `json:"invalid,omitempty"`
	// Enforced is the capacity kube-scheduler counts when it is not the
	// rule's: native mode's published value (nil elsewhere, or before the
	// publisher wrote one). Over-capacity is judged against it, since the
	// annotation reaches kube-scheduler only through it; the delay between
	// the two is reported apart.
	Enforced *int64 `json:"enforced,omitempty"`
	// Lowered is when the sampler first saw the capacity fall to its
	// current value (zero: never lowered while sampled); in native mode,
	// when the published capacity fell, since that is what kube-scheduler
	// counts (the delay from the annotation is reported apart).
	Lowered time.Time `json:"lowered,omitzero"`
	// Used is the need of the pods bound to it and not finished.
	Used int64 `json:"used"`
	// LastBound is when the latest of those pods was bound at the latest:
	// when the sampler first saw it bound, or the second after the
	// apiserver stamped its bind if that is earlier (observe.go, boundBy).
	LastBound time.Time `json:"lastBound,omitzero"`
	// Schedulable is false for a node a pod cannot go to regardless of IPs
	// (being deleted, tainted NoSchedule, unschedulable).
	Schedulable bool `json:"schedulable"`
	// View is capscale's view of this node: the ledger's used IPs
	// (extender mode) or the published capacity (native mode); nil where
	// the mode has none or the node is missing from it.
	View *int64 `json:"view,omitempty"`
}

// Pending is an unbound underlay pod.
type Pending struct {
	UID string `json:"uid"`
	// Name is namespace/name, as kube-scheduler's log names the pod.
	Name string `json:"name"`
	Need int64  `json:"need"`
	// Created is the pod's creation time: a wait judged from the end of a
	// fault's recovery may have begun long before.
	Created time.Time `json:"created"`
}

// Left is an underlay pod that stopped being Pending at At.
type Left struct {
	UID string    `json:"uid"`
	At  time.Time `json:"at"`
}

// Reservation is a pod the extender's ledger holds a reservation for,
// and what the apiserver says of that pod.
type Reservation struct {
	UID string `json:"uid"`
	// BoundFor is how long the apiserver has shown the pod bound (0: not
	// bound); GoneFor how long since it was deleted (0: it exists).
	BoundFor, GoneFor time.Duration
}

// Metric is one HPA metric read the way the HPA controller reads it.
type Metric struct {
	Name string `json:"name"`
	// Value is what the external metrics API answered; Err its error.
	Value float64 `json:"value"`
	Err   string  `json:"err,omitempty"`
	// Expected are the values the load source held during the freshness
	// window (the adapter's poll interval plus its staleness bound): a
	// fresh answer is one of them.
	Expected []float64 `json:"expected"`
}

// Sample is everything the checker looks at, taken at one instant.
type Sample struct {
	At time.Time `json:"at"`
	// View names capscale's view: "ledger", "published" or "" (plugin
	// mode: the scheduler's own cache, not observable).
	View    string    `json:"view"`
	Nodes   []Node    `json:"nodes"`
	Pending []Pending `json:"pending"`
	// LeftPending are the underlay pods seen Pending since the previous
	// sample that are Pending no more (bound or deleted), with when they
	// left: a pod that lives between two samples is in neither list, but
	// may be in the waiting set.
	LeftPending []Left `json:"leftPending,omitempty"`
	// Reservations is the ledger's (extender mode); nil otherwise.
	Reservations []Reservation `json:"reservations,omitempty"`
	// WaitingPods is the extender's capscale_extender_waiting_pods; nil
	// when not read (another mode, or the extender is down).
	WaitingPods *float64 `json:"waitingPods,omitempty"`
	// RequeueWrites is the extender's cumulative requeue writes that
	// reached the apiserver (requeued, gone, error); FreedIPs the IPs the
	// sampler saw freed so far (holders deleted or finished, capacity
	// raised). Both nil outside extender mode or while it is down.
	RequeueWrites *float64 `json:"requeueWrites,omitempty"`
	FreedIPs      int64    `json:"freedIPs"`
	// SchedulerAttempts is kube-scheduler's scheduler_schedule_attempts_total
	// (every profile and result); nil when not read. A pod that waited with
	// an IP free while the scheduler kept attempting other pods waited in
	// its queue; one that waited while it attempted nothing was not requeued.
	SchedulerAttempts *float64 `json:"schedulerAttempts,omitempty"`
	Metrics           []Metric `json:"metrics,omitempty"`
	// Fault names the fault in progress, if any ("kill extender",
	// "restart kube-apiserver"): the checker says which invariants it
	// relaxes while one runs.
	Fault string `json:"fault,omitempty"`
}
