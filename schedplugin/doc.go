// Package schedplugin is capscale's underlay-IP rule as a kube-scheduler
// framework plugin, UnderlayIP, compiled into capscale-scheduler
// (cmd/capscale-scheduler: kube-scheduler v1.37 with this plugin registered).
//
// It takes a node's capacity and a pod's need from internal/underlay, the
// rule the extender and the capacity publisher share, and counts the IPs in
// use from the scheduler's own NodeInfo, so kube-scheduler's cache
// (assume/forget of binds in flight, nominated pods, preemption's dry run)
// keeps every decision exact. The one thing it remembers is each node's
// capacity reading, for as long as the Node object is the same
// (capacity.go):
//
//   - PreFilter computes the pod's need once; Skip for a pod that needs none.
//   - Filter: free ≥ need; Unschedulable when the node is full (preemption
//     may free IPs), UnschedulableAndUnresolvable when its whole capacity is
//     too small or invalid.
//   - PreScore skips pods that need none; Score is the free count, and
//     NormalizeScore gives the nodes with the most free IPs the top score.
//   - EventsToRegister's queueing hints requeue a waiting pod when a pod
//     holding IPs goes, a node is added, or a node's capacity grows.
//   - Reserve keeps the chosen node's NodeInfo; Bind (before DefaultBinder)
//     reads that Node from the apiserver and refuses the bind when its
//     capacity changed since the scheduler's view and no longer fits, else
//     returns Skip for DefaultBinder (bindcheck.go).
//   - SignPod keeps kube-scheduler's opportunistic batching on for pods
//     that need no IP, and off for underlay pods, whose batch hints would
//     not rank by free IPs.
//
// The decisions are plain functions (rule.go); plugin.go and hints.go read
// the framework's objects and call them. docs/plugin-mode.md.
package schedplugin
