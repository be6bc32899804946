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
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

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

	// Index requests by node once: O(pods + nodes) instead of O(pods × nodes).
	used := make(map[string]Amounts, len(in.Nodes))
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
		nr.Allocatable = allocatable(n, defIPs)
		nr.Requested = Amounts{}
		nr.Free = Amounts{}
		for r := range nr.Allocatable {
			if _, needed := need[r]; !needed && r == UnderlayIP {
				continue
			}
			nr.Requested[r] = used[n.Name][r]
			nr.Free[r] = max(nr.Allocatable[r]-nr.Requested[r], 0)
			if r == UnderlayIP {
				nr.Free[r] = UnderlayIPFree(n, defIPs, nr.Requested[r])
			}
		}
		nr.Fits, nr.LimitingResource = fits(nr.Free, need)
		limitingCount[nr.LimitingResource]++
		res.Replicas += nr.Fits
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
func allocatable(n *corev1.Node, defIPs int64) Amounts {
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
	a[UnderlayIP] = UnderlayIPCapacity(n, defIPs)
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

// UnderlayIPFree is the node's free underlay IPs by the one rule
// (underlay.Free): its capacity less the larger of what the pods request
// and what its IPAM reports in use. A force-deleted pod's hold lives in the
// scheduler's memory, not here: the maximum is what the cluster can place
// once those IPs are back.
func UnderlayIPFree(n *corev1.Node, def, requested int64) int64 {
	return underlay.Free(underlay.NodeCapacity(n.Annotations, n.Labels, def), requested, 0)
}
