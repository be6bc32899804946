// Package underlay is the one home of the underlay-IP rule: what a node can
// hold (its capscale.io/underlay-ip-capacity annotation, else the capacity
// capscale-controller mirrored from the node's IPAM object, else the node
// label of that name, else the default)
// and what a pod needs (its effective request of capscale.io/underlay-ip).
// The extender's ledger, the workload API's capacity calculator and the
// native-mode capacity publisher all call it, so they cannot disagree.
package underlay

import (
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/capscale/capscale/internal/names"
)

// Resource is the extended resource as a ResourceName.
const Resource = v1.ResourceName(names.UnderlayIPResource)

// MaxCapacity bounds the capacity annotation (and a pod's need) so that sums
// over thousands of nodes cannot overflow int64. No node hosts a million
// underlay IPs.
const MaxCapacity = 1 << 20

// ParseCapacity parses the value of the capscale.io/underlay-ip-capacity node
// annotation: a non-negative decimal integer no larger than MaxCapacity,
// surrounding spaces allowed.
func ParseCapacity(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty value")
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not an integer: %q", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("negative: %d", v)
	}
	if v > MaxCapacity {
		return 0, fmt.Errorf("larger than %d: %d", MaxCapacity, v)
	}
	return v, nil
}

// Where a node's capacity comes from, in order of precedence.
const (
	// SourceAnnotation is the capscale.io/underlay-ip-capacity annotation:
	// a per-node override, lost when the Node object is re-created.
	SourceAnnotation = "annotation"
	// SourceIPAM is the capacity capscale-controller's capacity-source
	// mirror read from the node's IPAM object and wrote into the
	// capscale.io/underlay-ip-source-capacity annotation.
	SourceIPAM = "source"
	// SourceLabel is the capscale.io/underlay-ip-capacity label. The
	// kubelet sets its --node-labels every time it registers the Node, so
	// a capacity set there (per node pool) survives re-registration.
	SourceLabel = "label"
	// SourceDefault is the component's --default-capacity.
	SourceDefault = "default"
)

// InvalidPrefix starts the value the mirror writes into the
// capscale.io/underlay-ip-source-capacity annotation when a source gives no
// count for the node (its object is missing, its expression failed or gave
// no count): "invalid: <why>". The rule reads it as capacity 0 with that
// reason, never as the next source.
const InvalidPrefix = "invalid: "

// Capacity is a node's underlay-IP capacity and where it came from.
type Capacity struct {
	// IPs is what the node may hold; 0 when Invalid is set.
	IPs int64
	// Source is SourceAnnotation, SourceIPAM, SourceLabel or SourceDefault.
	Source string
	// Origin names, for SourceIPAM, the capacity source and the object
	// (the capscale.io/underlay-ip-source annotation); "" otherwise.
	Origin string
	// Invalid explains why the value at Source was rejected.
	Invalid string
	// DrawsAll: every pod of the node that is not hostNetwork takes an IP
	// from the pool this capacity counts (the capscale.io/underlay-ip-draws
	// annotation is "all"); see Charge.
	DrawsAll bool
	// Unread: capacity sources are configured and the mirror has not read
	// the node yet (Rule.AwaitSource); IPs is 0 and Invalid says so.
	Unread bool
	// IPAM is what the node's IPAM reports in use (used.go).
	IPAM IPAMReport
}

// NodeCapacity returns the underlay IP capacity of a node with the given
// annotations and labels, from the first of these that is set: the
// capacity annotation (a per-node override), the capacity mirrored from
// the node's IPAM object, the label, def. An invalid value gives 0 and a
// reason, never the next source: a broken override or a missing IPAM
// object must not silently turn into a guess.
//
// The hot path is two or three map reads and a strconv: the mirrored value
// is a plain integer, and its origin is read only for a node that has one.
func NodeCapacity(annotations, labels map[string]string, def int64) Capacity {
	return withIPAMReport(withDraws(nodeCapacity(annotations, labels, def), annotations), annotations)
}

// nodeCapacity is NodeCapacity before the draws annotation and the IPAM's
// report of IPs in use.
func nodeCapacity(annotations, labels map[string]string, def int64) Capacity {
	if s, ok := annotations[names.UnderlayIPCapacityAnnotation]; ok {
		return parsed(s, SourceAnnotation, "")
	}
	if s, ok := annotations[names.UnderlayIPSourceCapacityAnnotation]; ok {
		return parsed(s, SourceIPAM, annotations[names.UnderlayIPSourceAnnotation])
	}
	if s, ok := labels[names.UnderlayIPCapacityLabel]; ok {
		return parsed(s, SourceLabel, "")
	}
	return Capacity{IPs: def, Source: SourceDefault}
}

// parsed is the capacity s gives at source.
func parsed(s, source, origin string) Capacity {
	c, err := ParseCapacity(s)
	if err == nil {
		return Capacity{IPs: c, Source: source, Origin: origin}
	}
	if source != SourceIPAM {
		return Capacity{Source: source, Invalid: fmt.Sprintf("invalid %s %s (%v), treating capacity as 0", names.UnderlayIPCapacityAnnotation, source, err)}
	}
	why := err.Error()
	if r, ok := strings.CutPrefix(s, InvalidPrefix); ok {
		why = r
	}
	from := "capacity source"
	if origin != "" {
		from += " " + origin
	}
	return Capacity{Source: source, Origin: origin,
		Invalid: fmt.Sprintf("invalid %s from %s (%s), treating capacity as 0", names.UnderlayIPSourceCapacityAnnotation, from, why)}
}

// PodNeed returns how many underlay IPs pod needs: kube-scheduler's effective
// request (component-helpers' PodRequests: app containers and sidecars
// summed, at least the largest init container, plus the pod overhead) of
// capscale.io/underlay-ip. A container that sets only a limit counts the
// limit, as the API server defaults it for extended resources; pod templates
// are never defaulted, so the rule must do it itself.
func PodNeed(pod *v1.Pod) int64 {
	if pod == nil {
		return 0
	}
	// PodRequests walks every resource of every container; hand it a pod
	// that carries only ours, so that the hot path stays a few allocations.
	slim := v1.Pod{Spec: v1.PodSpec{
		Containers:     slimContainers(pod.Spec.Containers),
		InitContainers: slimContainers(pod.Spec.InitContainers),
	}}
	if q, ok := pod.Spec.Overhead[Resource]; ok {
		slim.Spec.Overhead = v1.ResourceList{Resource: q}
	}
	if slim.Spec.Containers == nil && slim.Spec.InitContainers == nil && slim.Spec.Overhead == nil {
		return 0
	}
	q := resourcehelper.PodRequests(&slim, resourcehelper.PodResourcesOptions{SkipPodLevelResources: true})[Resource]
	return clamp(q.Value())
}

// slimContainers returns cs reduced to their underlay request (the limit
// when there is no request), clamped; nil when none asks for any.
func slimContainers(cs []v1.Container) []v1.Container {
	var out []v1.Container
	for i := range cs {
		r := &cs[i].Resources
		q, ok := r.Requests[Resource]
		if !ok {
			q, ok = r.Limits[Resource]
		}
		if !ok {
			// Adds nothing to a sum or a maximum of non-negative needs.
			continue
		}
		if out == nil {
			out = make([]v1.Container, 0, len(cs))
		}
		// Clamped per container so that a hostile quantity cannot
		// overflow the sum.
		out = append(out, v1.Container{Name: cs[i].Name, RestartPolicy: cs[i].RestartPolicy,
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
				Resource: *resource.NewQuantity(clamp(q.Value()), resource.DecimalSI)}}})
	}
	return out
}

// clamp keeps a hostile or broken quantity from overflowing sums.
func clamp(v int64) int64 {
	if v < 0 {
		return 0
	}
	return min(v, MaxCapacity)
}

// Holds reports whether a pod bound to nodeName in phase holds its need on
// that node: it is bound and has not finished. A pod being deleted still
// holds its IPs until it is gone.
func Holds(nodeName string, phase v1.PodPhase) bool {
	return nodeName != "" && phase != v1.PodSucceeded && phase != v1.PodFailed
}
