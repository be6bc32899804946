// Package extender is capscale's kube-scheduler HTTP extender for underlay IP
// capacity.
//
// A node can host only a limited number of underlay IPs. Pods state their need
// as the extended resource capscale.io/underlay-ip; the extender keeps a
// Ledger of every node's capacity, the IPs held by the pods bound to it and
// the reservations of binds in flight. Filter is an optimistic read of that
// ledger that keeps only the candidates with the most free IPs, so that
// kube-scheduler's own scores break ties among them: deploy/ configures no
// prioritize step (/prioritize is still served for a configuration that
// sets prioritizeVerb). Bind re-checks and reserves under the ledger's lock
// before it creates the Binding, so that no node is ever over-committed,
// even when many pods are scheduled at once; and only the extender whose
// binder ID holds the binder lease binds at all (extender/binderlease).
//
// The decision logic (Fits, Scores, victim accounting) is plain Go over plain
// types; the underlay-IP rule itself (a node's capacity, a pod's need) lives
// in internal/underlay. Informers feed the ledger; the chi handlers in
// handler.go are a thin transport layer around it.
//
// # HTTP API
//
//	POST /filter      extenderv1.ExtenderArgs → ExtenderFilterResult
//	POST /prioritize  extenderv1.ExtenderArgs → HostPriorityList (0..10); unused by deploy/
//	POST /bind        ExtenderBindingArgs → ExtenderBindingResult
//	POST /preempt     ExtenderPreemptionArgs → ExtenderPreemptionResult
//	GET  /capacity    Report: per node capacity, used, reserved, free, pods
//	GET  /healthz     200 while the process serves
//	GET  /readyz      200 once the ledger is rebuilt from the informers
//	GET  /metrics     Prometheus, capscale_extender_* plus Go and process
//
// Until /readyz is 200 the verbs and /capacity answer 503: a ledger that has
// not seen every pod could over-commit a node. Bad input is a 400 (413 for a
// body over the limit) with the body {"code","reason","message"}.
//
// Filter answers in the mode it was asked: NodeNames (nodeCacheCapable) or
// full Nodes, returned exactly as received. A node without room is listed in
// FailedNodes ("underlay IPs exhausted: 10/10 used, pod needs 1") or, when no
// preemption can help (capacity too small or an invalid annotation), in
// FailedAndUnresolvableNodes.
package extender
