// Package names holds every annotation, resource and metric name capscale
// shares with users, so that one place documents the public surface.
package names

const (
	// UnderlayIPResource is the extended resource a pod requests for each
	// underlay IP it needs (limits: {capscale.io/underlay-ip: 1}).
	UnderlayIPResource = "capscale.io/underlay-ip"
	// UnderlayIPCapacityAnnotation on a Node is that node's underlay IP
	// capacity: a per-node override of the label below and of the
	// extender's --default-capacity.
	UnderlayIPCapacityAnnotation = "capscale.io/underlay-ip-capacity"
	// UnderlayIPCapacityLabel on a Node is the capacity that survives the
	// Node's re-creation: set it with the kubelet's --node-labels (per node
	// pool). The annotation, if present, overrides it.
	UnderlayIPCapacityLabel = "capscale.io/underlay-ip-capacity"
	// UnderlayIPPublishedAnnotation records on a Node the capacity native
	// mode's publisher wrote into its status; without it, the resource on
	// the node is someone else's and the publisher leaves it alone.
	UnderlayIPPublishedAnnotation = "capscale.io/underlay-ip-published"
	// UnderlayIPSourceCapacityAnnotation on a Node is the capacity that
	// capscale-controller's capacity-source mirror read from the node's
	// IPAM object (a capacity source, --capacity-sources): a plain integer,
	// or "invalid: <why>" when the object is missing or its expression
	// failed. The capacity annotation above overrides it; it overrides the
	// label. Only the mirror should write it.
	UnderlayIPSourceCapacityAnnotation = "capscale.io/underlay-ip-source-capacity"
	// UnderlayIPSourceAnnotation on a Node names the capacity source and
	// the object the mirror read, "<source> <resource>.<group>/<name>"
	// (namespace/name for a namespaced object): for display and Events
	// only, never parsed by the rule.
	UnderlayIPSourceAnnotation = "capscale.io/underlay-ip-source"
	// UnderlayIPUnpublishedTaint is the startup taint (NoSchedule) a node
	// autoscaler puts on the nodes it launches (Karpenter: a NodePool's
	// startupTaints): the node's underlay-IP capacity is not in its status
	// yet, so the autoscaler counts the node as coming, not as full. Native
	// mode's publisher removes it once it has published the node's valid
	// capacity, and a node that carries it is capscale's to publish even if
	// its status already advertises the resource.
	UnderlayIPUnpublishedTaint = "capscale.io/underlay-ip-unpublished"
	// UnderlayIPDriver is DRA mode's driver name: the ResourceSlices that
	// publish each node's underlay IPs as devices, one pool per node named
	// after it, are this driver's.
	UnderlayIPDriver = "ip.capscale.io"
	// UnderlayIPDeviceClass is the DeviceClass whose extendedResourceName
	// is UnderlayIPResource: with it, kube-scheduler allocates a pod's
	// capscale.io/underlay-ip request from UnderlayIPDriver's devices.
	UnderlayIPDeviceClass = "underlay-ip.capscale.io"
)

const (
	// UnderlayIPSourceMaxCapacityAnnotation on a Node is what the node's
	// IPAM pool may grow to, as the mirror read it from the node's object
	// with the source's maxCapacity (an ENI limit, spec.ipam.max-allocate,
	// Azure CNS's status.scaler.maxIPCount): a plain integer, or
	// "invalid: <why>" when the expression failed; absent when the source
	// has none or the object does not say. Information only: no mode
	// schedules on it (the pool grows when pods need it, not before), and
	// `kubectl capscale ips` and the workload API show it beside the
	// capacity. Only the mirror should write it.
	UnderlayIPSourceMaxCapacityAnnotation = "capscale.io/underlay-ip-source-max-capacity"

	// UnderlayIPSourceUsedAnnotation on a Node is how many of the node's
	// underlay IPs its IPAM reports in use, as capscale-controller's
	// capacity-source mirror read it (a source's `used` expression): a
	// plain integer, or "invalid: <why>". The rule charges a node the
	// union of this and what its pods hold (this plus the pods with no IP
	// yet, or the pods and holds if more), so that an IP is free only once
	// both the pods and the IPAM have it back. Only the mirror should
	// write it.
	UnderlayIPSourceUsedAnnotation = "capscale.io/underlay-ip-source-used"
	// UnderlayNamespaceLabel marks a namespace whose pods use underlay IPs:
	// capscale's MutatingAdmissionPolicy gives each of its pods that is not
	// hostNetwork and asks for no IP one capscale.io/underlay-ip, and
	// `kubectl capscale ips` warns about its pods that hold none.
	UnderlayNamespaceLabel = "capscale.io/underlay"

	// SinglePodQPSAnnotation and TotalQPSAnnotation on a Deployment or
	// StatefulSet are the inputs of the QPS policy: the QPS one pod serves
	// (> 0) and the QPS to serve (≥ 0).
	SinglePodQPSAnnotation = "capscale.io/single-pod-qps"
	TotalQPSAnnotation     = "capscale.io/total-qps"
	// ReplicasBeforeStopAnnotation is written by stop and consumed by start.
	ReplicasBeforeStopAnnotation = "capscale.io/replicas-before-stop"

	// LoadIndexMetric is the external metric of a source's latest load index
	// (label source).
	LoadIndexMetric = "capscale-load-index"
	// DesiredReplicasMetric is the external metric of a policy's replica
	// count (labels workload and policy).
	DesiredReplicasMetric = "capscale-desired-replicas"
	// TotalQPSMetric is the external metric of a workload's total QPS.
	TotalQPSMetric = "capscale-total-qps"
	// RealQPSMetric is the QPS the ready replicas can serve.
	RealQPSMetric = "capscale-real-qps"

	// PolicyQPS and PolicyLoadStep are the values of the policy label.
	PolicyQPS      = "qps"
	PolicyLoadStep = "load-step"

	// DelegateAnnotation on the APIService v1beta1.external.metrics.k8s.io
	// records the server capscale took it over from (the delegate), which
	// the adapter forwards other metrics to and `preflight --restore` gives
	// the APIService back to.
	DelegateAnnotation = "capscale.io/external-metrics-delegate"
	// ReleasedAnnotation on that APIService names the install whose
	// `preflight --restore` (helm uninstall's hook) gave it back: the UID of
	// that install's ClusterRole capscale:metrics-adapter. No adapter of that
	// install, however often it restarts, takes it over again; another
	// install (another UID) may.
	ReleasedAnnotation = "capscale.io/external-metrics-released"
	// OwnMetricPrefix marks the external metrics capscale answers itself;
	// every other name goes to the delegate.
	OwnMetricPrefix = "capscale-"

	// ElasticWebLabel marks the objects of an ElasticWeb (its name is the
	// value) and selects its pods.
	ElasticWebLabel = "capscale.io/elasticweb"

	// FieldManager is capscale's field manager: capscale-controller's
	// server-side applies, the workload API's restart, stop, start and
	// scale, and preflight's writes of the APIService.
	FieldManager = "capscale"
	// WorkloadAPIFieldManager is the field manager of the workload API's
	// writes of an ElasticWeb's spec (PUT .../elasticwebs/{name}), apart
	// from the controller's "capscale", which owns the objects it makes.
	WorkloadAPIFieldManager = "capscale-workload-api"
)

// Which pods draw from a node's pool, and whether the mirror has read the
// node (issue 49 §2, §4).
const (
	// UnderlayIPDrawsAnnotation on a Node says which of its pods take an IP
	// from the pool the capacity counts, as the capacity source covering
	// it says (its draws field): "all" (every pod that is not hostNetwork,
	// as with Cilium ENI/Azure/multi-pool's default pool and Azure CNS) or
	// "marked" (only pods that ask for capscale.io/underlay-ip: a separate
	// underlay pool). Absent, only marked pods draw. Only the mirror
	// should write it.
	UnderlayIPDrawsAnnotation = "capscale.io/underlay-ip-draws"
	// UnderlayIPSourceNone is the value of the
	// capscale.io/underlay-ip-source annotation on a Node the mirror has
	// read and no capacity source covers: its capacity is the label's or
	// the default. With capacity sources configured, a node with neither
	// this mark nor a mirrored capacity has not been read yet and counts 0.
	UnderlayIPSourceNone = "none"
	// UnderlayIPReleaseFinalizer is native mode's finalizer on the pods that
	// ask for capscale.io/underlay-ip (a MutatingAdmissionPolicy adds it):
	// a pod deleted with grace 0 stays Terminating, and so counted by
	// kube-scheduler, until its node gave its IPs back; the capacity
	// publisher's replica removes it then (extender/release).
	UnderlayIPReleaseFinalizer = "capscale.io/underlay-ip-release"
)
