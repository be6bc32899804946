// Package wire serves kube-scheduler's HTTP extender protocol over the
// extender core (package extender): it bounds and decodes each call's body
// into per-call buffers (Scratch), asks the core's ledger and decisions, counts
// what a request decided (metrics, the waiting-pod bookkeeping) and writes the
// answer by hand. Nothing in package extender knows HTTP.
//
// # HTTP API
//
//	POST /filter      extenderv1.ExtenderArgs → ExtenderFilterResult
//	POST /prioritize  extenderv1.ExtenderArgs → HostPriorityList (0..10); unused by deploy/
//	POST /bind        ExtenderBindingArgs → ExtenderBindingResult
//	POST /preempt     ExtenderPreemptionArgs → ExtenderPreemptionResult
//	GET  /capacity    extender.Report: per node capacity, used, reserved, free, pods
//	GET  /healthz     200 while the process serves
//	GET  /readyz      200 once the ledger is rebuilt from the informers
//	                  (and the capacity sources, with --capacity-sources)
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
// FailedAndUnresolvableNodes. deploy/ configures no prioritize step: filter
// already keeps only the most free.
package wire
