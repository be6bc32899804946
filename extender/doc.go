// Package extender is capscale's kube-scheduler HTTP extender for underlay IP
// capacity.
//
// A node can host only a limited number of underlay IPs. Pods state their need
// as the extended resource capscale.io/underlay-ip; the extender keeps a
// Ledger of every node's capacity, the IPs held by the pods bound to it and
// the reservations of binds in flight. Filter and prioritize are optimistic
// reads of that ledger; bind re-checks and reserves under the ledger's lock
// before it creates the Binding, so that no node is ever over-committed, even
// when many pods are scheduled at once.
//
// The decision logic (PodNeed, ParseCapacity, Fits, Score, victim accounting)
// is plain Go over plain types. Informers feed the ledger; the chi handlers in
// handler.go are a thin transport layer around it.
package extender
