// Package capacity computes how many more replicas of a pod template the
// cluster can place, node by node. It is plain Go over plain API types: no
// clients, no clocks, so that every rule is testable as a table.
//
// Per node and per resource, free = allocatable − requests of the
// non-terminal pods bound to that node. The replicas a node can take is the
// floor of the smallest free/need ratio over the resources the template
// needs; nodes the scheduler would never pick (unschedulable, NotReady,
// untolerated NoSchedule/NoExecute taints, failing nodeSelector or required
// node affinity) take none. The answer is the sum over nodes, so that
// fragmentation is honoured: three nodes with 1.5 free CPUs each hold three
// 1-CPU pods, not four.
package capacity

import (
	"fmt"
	"maps"
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/ipreport"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// Resource names one of the dimensions the calculator checks.
type Resource string

const (
	// CPU is counted in millicores.
	CPU Resource = Resource(corev1.ResourceCPU)
	// Memory is counted in bytes.
	Memory Resource = Resource(corev1.ResourceMemory)
	// Pods is the node's pod slots (allocatable "pods").
	Pods Resource = Resource(corev1.ResourcePods)
	// UnderlayIP is capscale's extended resource; a node's capacity for it
	// comes from the capscale.io/underlay-ip-capacity annotation.
	UnderlayIP Resource = Resource(names.UnderlayIPResource)
)

// order is the stable order in which resources are reported and ties broken.
var order = []Resource{CPU, Memory, Pods, UnderlayIP}

// DefaultUnderlayIPCapacity is a node's underlay IP capacity when it has no
// annotation, the same default as the extender's --default-capacity.
const DefaultUnderlayIPCapacity = 10

// Input is everything a computation looks at.
type Input struct {
	// Template is the pod template of the workload being scaled.
	Template corev1.PodTemplateSpec
	// Nodes and Pods are the cluster as the informers see it. Pods that are
	// not bound to a listed node are ignored.
	Nodes []*corev1.Node
	Pods  []*corev1.Pod
	// DefaultUnderlayIPCapacity applies to nodes without the capacity
	// annotation; zero means DefaultUnderlayIPCapacity.
	DefaultUnderlayIPCapacity int64
	// AwaitCapacitySource: capacity sources are configured, and a node the
	// mirror has not read takes no underlay pod (underlay.Rule.AwaitSource).
	AwaitCapacitySource bool
	// Usage is optional live usage from metrics.k8s.io, by node name. It is
	// reported, never used for fitting: the scheduler fits on requests.
	Usage map[string]Usage
}

// Usage is a node's live usage as metrics.k8s.io reports it.
type Usage struct {
	CPUMillis   int64 `json:"cpuMillis"`
	MemoryBytes int64 `json:"memoryBytes"`
}

// Amounts maps a resource to an amount in its unit (millicores, bytes,
// count).
type Amounts map[Resource]int64

// NodeResult is one node's share of the answer.
type NodeResult struct {
	Name string `json:"name"`
	// Fits is how many more replicas this node can take.
	Fits int64 `json:"fits"`
	// Excluded says why the node takes no replicas regardless of its free
	// resources; empty for eligible nodes.
	Excluded string `json:"excluded,omitempty"`
	// LimitingResource is the resource that bounds Fits on an eligible node.
	LimitingResource Resource `json:"limitingResource,omitempty"`
	Allocatable      Amounts  `json:"allocatable,omitempty"`
	Requested        Amounts  `json:"requested,omitempty"`
	Free             Amounts  `json:"free,omitempty"`
	Usage            *Usage   `json:"usage,omitempty"`
	// UnderlayIPMayGrowTo is what the node's IPAM pool may grow to, as its
	// capacity source says (capscale.io/underlay-ip-source-max-capacity);
	// nil when it does not say. Allocatable's underlay IPs are what fits.
	UnderlayIPMayGrowTo *int64 `json:"underlayIPMayGrowTo,omitempty"`
}

// Result is the answer of Compute.
type Result struct {
	// Replicas is how many more replicas fit, summed over nodes.
	Replicas int64 `json:"replicas"`
	// LimitingResource is the resource that bounds the most eligible nodes;
	// empty when no node is eligible.
	LimitingResource Resource `json:"limitingResource,omitempty"`
	// Reason explains the answer in one sentence.
	Reason string `json:"reason"`
	// PerReplica is what one replica needs.
	PerReplica     Amounts      `json:"perReplica"`
	EligibleNodes  int          `json:"eligibleNodes"`
	ExcludedNodes  int          `json:"excludedNodes"`
	Nodes          []NodeResult `json:"nodes"`
	UsageAvailable bool         `json:"usageAvailable"`
	// ReplicasIfPoolsGrow is how many more replicas would fit were every
	// pool to grow to what its capacity source says it may
	// (NodeResult.UnderlayIPMayGrowTo; others as they are): a separate
	// figure, not a promise, since a pool grows only as the IPAM fills it.
	// Nil when no eligible node says; Replicas is the answer.
	ReplicasIfPoolsGrow *int64 `json:"replicasIfPoolsGrow,omitempty"`
}

// Compute answers how many more replicas of in.Template fit.
func Compute(in Input) Result {
	defIPs := in.DefaultUnderlayIPCapacity
	if defIPs <= 0 {
		defIPs = DefaultUnderlayIPCapacity
	}
	templatePod := &corev1.Pod{ObjectMeta: in.Template.ObjectMeta, Spec: in.Template.Spec}
	need := PodNeeds(templatePod)
	affinity := nodeaffinity.GetRequiredNodeAffinity(templatePod)

	rule := underlay.Rule{Default: defIPs, AwaitSource: in.AwaitCapacitySource}
	// Index requests by node once: O(pods + nodes) instead of O(pods × nodes).
	used := make(map[string]Amounts, len(in.Nodes))
	// drawn is, per node, what its pod-network pods that ask for no IP
	// take from a draws-all pool (underlay.Drawn).
	drawn := map[string]int64{}
	// unlisted is, per node, the same two for the pods with no IP yet,
	// which the IPAM cannot list (underlay.Listed).
	unlisted := map[string]unlistedIPs{}
	for _, p := range in.Pods {
		if p == nil || p.Spec.NodeName == "" || isTerminal(p) {
			continue
		}
		u := used[p.Spec.NodeName]
		if u == nil {
			u = Amounts{}
			used[p.Spec.NodeName] = u
		}
		for r, v := range PodNeeds(p) {
			u[r] += v
		}
		ipNeed, ipDrawn := underlay.PodNeed(p), underlay.Drawn(underlay.PodNeed(p), underlay.PodNetwork(p))
		drawn[p.Spec.NodeName] += ipDrawn
		if !underlay.Listed(p) {
			ul := unlisted[p.Spec.NodeName]
			unlisted[p.Spec.NodeName] = unlistedIPs{need: ul.need + ipNeed, drawn: ul.drawn + ipDrawn}
		}
	}

	res := Result{PerReplica: need, Nodes: make([]NodeResult, 0, len(in.Nodes)), UsageAvailable: in.Usage != nil}
	limitingCount := map[Resource]int{}
	for _, n := range in.Nodes {
		if n == nil {
			continue
		}
		nr := NodeResult{Name: n.Name}
		if u, ok := in.Usage[n.Name]; ok {
			nr.Usage = &u
		}
		if reason := excluded(n, templatePod, affinity); reason != "" {
			nr.Excluded = reason
			res.ExcludedNodes++
			res.Nodes = append(res.Nodes, nr)
			continue
		}
		res.EligibleNodes++
		c := rule.Capacity(n.Annotations, n.Labels)
		nr.Allocatable = allocatable(n, c.IPs)
		nodeNeed := need
		if ips := underlay.Charge(need[UnderlayIP], underlay.PodNetwork(templatePod), c.DrawsAll); ips != need[UnderlayIP] {
			// A draws-all pool gives every pod-network replica an IP.
			nodeNeed = maps.Clone(need)
			nodeNeed[UnderlayIP] = ips
		}
		nr.Requested = Amounts{}
		nr.Free = Amounts{}
		for r := range nr.Allocatable {
			if _, needed := nodeNeed[r]; !needed && r == UnderlayIP {
				continue
			}
			nr.Requested[r] = used[n.Name][r]
			if r == UnderlayIP && c.DrawsAll {
				nr.Requested[r] += drawn[n.Name]
			}
			nr.Free[r] = max(nr.Allocatable[r]-nr.Requested[r], 0)
			if r == UnderlayIP {
				nr.Free[r] = UnderlayIPFree(c, underlay.Charges{Pods: nr.Requested[r], Unlisted: unlisted[n.Name].charge(c)})
			}
		}
		nr.Fits, nr.LimitingResource = fits(nr.Free, nodeNeed)
		limitingCount[nr.LimitingResource]++
		res.Replicas += nr.Fits
		mayGrow(&res, &nr, n, need)
		res.Nodes = append(res.Nodes, nr)
	}
	sort.Slice(res.Nodes, func(i, j int) bool { return res.Nodes[i].Name < res.Nodes[j].Name })

	best := 0
	for _, r := range order {
		if c := limitingCount[r]; c > best {
			best, res.LimitingResource = c, r
		}
	}
	switch {
	case len(res.Nodes) == 0:
		res.Reason = "no nodes"
	case res.EligibleNodes == 0:
		res.Reason = fmt.Sprintf("none of the %d nodes is eligible for this pod template (unschedulable, NotReady, untolerated taints or unmatched node selector)", res.ExcludedNodes)
	default:
		res.Reason = fmt.Sprintf("%d more replicas fit on %d eligible nodes; %s is the limit on %d of them", res.Replicas, res.EligibleNodes, res.LimitingResource, best)
	}
	return res
}

// mayGrow adds nr's node to res.ReplicasIfPoolsGrow: what fits were its
// pool at the size its capacity source says it may grow to.
func mayGrow(res *Result, nr *NodeResult, n *corev1.Node, need Amounts) {
	nr.UnderlayIPMayGrowTo, _ = ipreport.MaxCapacity(n.Annotations)
	grown := nr.Fits
	if m := nr.UnderlayIPMayGrowTo; m != nil && *m > nr.Allocatable[UnderlayIP] {
		free := Amounts{}
		for r, v := range nr.Free {
			free[r] = v
		}
		if _, needed := need[UnderlayIP]; needed {
			free[UnderlayIP] = max(*m-nr.Requested[UnderlayIP], 0)
		}
		grown, _ = fits(free, need)
	}
	if nr.UnderlayIPMayGrowTo != nil && res.ReplicasIfPoolsGrow == nil {
		res.ReplicasIfPoolsGrow = new(int64)
		// Nodes before this one count as they are.
		*res.ReplicasIfPoolsGrow = res.Replicas - nr.Fits
	}
	if res.ReplicasIfPoolsGrow != nil {
		*res.ReplicasIfPoolsGrow += grown
	}
}

// PodNeeds is what a pod (or template) requests of the resources the
// calculator tracks. Pod slots are always 1; CPU, memory and underlay IPs
// appear only when requested. Containers that set a limit without a request
// count the limit, as API defaulting would for a created pod.
func PodNeeds(p *corev1.Pod) Amounts {
	reqs := resourcehelper.PodRequests(withRequestsDefaulted(p), resourcehelper.PodResourcesOptions{})
	out := Amounts{Pods: 1}
	if q, ok := reqs[corev1.ResourceCPU]; ok && !q.IsZero() {
		out[CPU] = q.MilliValue()
	}
	if q, ok := reqs[corev1.ResourceMemory]; ok && !q.IsZero() {
		out[Memory] = q.Value()
	}
	if q, ok := reqs[corev1.ResourceName(names.UnderlayIPResource)]; ok && !q.IsZero() {
		out[UnderlayIP] = q.Value()
	}
	return out
}

// withRequestsDefaulted returns p, or a copy of it in which every container
// limit without a matching request is also a request. A pod template is never
// defaulted by the API server, so without this a template that sets only
// limits (the usual way to ask for an extended resource) would look free.
func withRequestsDefaulted(p *corev1.Pod) *corev1.Pod {
	needsCopy := false
	check := func(cs []corev1.Container) {
		for _, c := range cs {
			for name := range c.Resources.Limits {
				if _, ok := c.Resources.Requests[name]; !ok {
					needsCopy = true
				}
			}
		}
	}
	check(p.Spec.Containers)
	check(p.Spec.InitContainers)
	if !needsCopy {
		return p
	}
	c := p.DeepCopy()
	fill := func(cs []corev1.Container) {
		for i := range cs {
			for name, q := range cs[i].Resources.Limits {
				if _, ok := cs[i].Resources.Requests[name]; !ok {
					if cs[i].Resources.Requests == nil {
						cs[i].Resources.Requests = corev1.ResourceList{}
					}
					cs[i].Resources.Requests[name] = q.DeepCopy()
				}
			}
		}
	}
	fill(c.Spec.Containers)
	fill(c.Spec.InitContainers)
	return c
}

func isTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// excluded returns why node n can take no pod of the template, or "".
func excluded(n *corev1.Node, pod *corev1.Pod, affinity nodeaffinity.RequiredNodeAffinity) string {
	if n.Spec.Unschedulable {
		return "unschedulable"
	}
	if !isReady(n) {
		return "NotReady"
	}
	// Comparison operators in tolerations are behind an alpha gate; treat
	// them as the default scheduler does with the gate off.
	taint, untolerated := schedcorev1.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
	if untolerated {
		return fmt.Sprintf("taint %s not tolerated", taint.ToString())
	}
	ok, err := affinity.Match(n)
	if err != nil {
		return fmt.Sprintf("node affinity of the template is invalid: %v", err)
	}
	if !ok {
		return "node labels do not match the template's nodeSelector or required node affinity"
	}
	return ""
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// allocatable is the node's allocatable for every tracked resource.
func allocatable(n *corev1.Node, ips int64) Amounts {
	a := Amounts{}
	if q, ok := n.Status.Allocatable[corev1.ResourceCPU]; ok {
		a[CPU] = q.MilliValue()
	}
	if q, ok := n.Status.Allocatable[corev1.ResourceMemory]; ok {
		a[Memory] = q.Value()
	}
	if q, ok := n.Status.Allocatable[corev1.ResourcePods]; ok {
		a[Pods] = q.Value()
	}
	a[UnderlayIP] = ips
	return a
}

// UnderlayIPCapacity is the node's underlay IP capacity by the extender's
// rule (underlay.NodeCapacity), so both agree: an invalid value is 0, never
// the default, because the extender places no pod on such a node.
func UnderlayIPCapacity(n *corev1.Node, def int64) int64 {
	return underlay.NodeCapacity(n.Annotations, n.Labels, def).IPs
}

// fits is floor(min over needed resources of free/need) and the resource
// that attains the minimum. A resource the node does not advertise at all
// has zero free.
func fits(free, need Amounts) (int64, Resource) {
	best := int64(math.MaxInt64)
	var limiting Resource
	for _, r := range order {
		n, ok := need[r]
		if !ok || n <= 0 {
			continue
		}
		if f := free[r] / n; f < best {
			best, limiting = f, r
		}
	}
	if limiting == "" {
		return 0, ""
	}
	return best, limiting
}

// UnderlayIPFree is the free underlay IPs of a node of capacity c (the
// rule's reading, underlay.Rule.Capacity) by the one rule (underlay.Free):
// its capacity less the union of what the pods are charged (their requests
// and, on a draws-all node, drawn) and what its IPAM reports in use. A
// force-deleted pod's hold lives in the scheduler's memory, not here: the
// maximum is what the cluster can place once those IPs are back.
func UnderlayIPFree(c underlay.Capacity, ch underlay.Charges) int64 {
	return underlay.Free(c, ch)
}

// unlistedIPs are the needs and drawn of a node's pods with no IP yet.
type unlistedIPs struct{ need, drawn int64 }

// charge is what they take from a node of capacity c.
func (u unlistedIPs) charge(c underlay.Capacity) int64 {
	if c.DrawsAll {
		return u.need + u.drawn
	}
	return u.need
}
