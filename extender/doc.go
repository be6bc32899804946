// Package extender is the core of capscale's kube-scheduler extender for
// underlay IP capacity: the state and the decisions, with no HTTP in it
// (extender/wire speaks kube-scheduler's extender protocol around it).
//
// A node can host only a limited number of underlay IPs. Pods state their need
// as the extended resource capscale.io/underlay-ip. The Ledger is state: every
// node's capacity, the IPs held by the pods bound to it and the reservations
// of binds in flight; each change returns the room it freed. The Tracker
// feeds it from the pod and node informers (informers.go) and tells Waiting
// and the metrics what each change did.
// Filter and Rescues are plain decisions over the ledger's NodeUsage values:
// filter keeps only the candidates with the most free IPs, so that
// kube-scheduler's own scores break ties among them; preemption keeps a node
// where evicting the victims frees enough. The Binder re-checks and reserves
// under the ledger's lock before it creates the Binding, so that no node is
// ever over-committed, even when many pods are scheduled at once; and only
// the extender whose binder ID holds the binder lease binds at all
// (extender/binderlease).
//
// Waiting and the Requeuer remember the pods rejected for lack of IPs and ask
// kube-scheduler to retry them when IPs are freed; the Reconciler settles
// reservations whose pod the informer never showed bound. The underlay-IP rule
// itself (a node's capacity, a pod's need) lives in internal/underlay.
package extender
