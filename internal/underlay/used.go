package underlay

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/names"
)

// IPAMReport is what a node's IPAM reports in use: the
// capscale.io/underlay-ip-source-used annotation the capacity-source mirror
// writes from a source's `used` expression.
type IPAMReport struct {
	// Used is the IPs the IPAM holds on the node, pods' or not.
	Used int64
	// Reported is true when the node carries a valid report.
	Reported bool
}

// withIPAMReport adds the node's IPAM report to c. An invalid report makes
// the node invalid (capacity 0) with the reason: a node whose IPAM cannot
// say what it holds must not be counted as if it held nothing.
func withIPAMReport(c Capacity, annotations map[string]string) Capacity {
	s, ok := annotations[names.UnderlayIPSourceUsedAnnotation]
	if !ok || c.Invalid != "" {
		return c
	}
	v, err := ParseCapacity(s)
	if err == nil {
		c.IPAM = IPAMReport{Used: v, Reported: true}
		return c
	}
	why := err.Error()
	if r, cut := strings.CutPrefix(s, InvalidPrefix); cut {
		why = r
	}
	return Capacity{Source: c.Source, Origin: c.Origin, DrawsAll: c.DrawsAll,
		Invalid: fmt.Sprintf("invalid %s (%s), treating capacity as 0", names.UnderlayIPSourceUsedAnnotation, why)}
}

// Charges are what a node's pods take from its pool, as a consumer counts
// them: each pod by PodCharge.
type Charges struct {
	// Pods is what the pods the consumer counts there hold: bound and, in
	// a scheduler, assumed, reserved or nominated.
	Pods int64
	// Unlisted is the part of Pods whose pods have no IP yet (Listed is
	// false): bound before their CNI ADD, or not bound at all. No IPAM can
	// list them yet.
	Unlisted int64
	// Held is what force-deleted pods may still hold there (hold.go).
	Held int64
}

// Listed reports whether pod's IPs can be in its IPAM's report: its node
// has set up its sandbox, CNI ADD included, and written its IPs to
// status.podIPs (the kubelet writes them only once every network of the
// sandbox is set up). A pod without them is not in any IPAM's list yet.
func Listed(pod *v1.Pod) bool {
	return pod != nil && (len(pod.Status.PodIPs) > 0 || pod.Status.PodIP != "")
}

// Charged is what the rule counts as taken on a node. Without an IPAM
// report: what the pods hold plus what force-deleted pods may still hold
// (held, hold.go). With one, the union of the two sets, which hold
// different IPs: the IPAM lists a force-deleted pod until its CNI DEL and
// a bound pod only from its CNI ADD on. So the larger of what the pods and
// the holds charge, and what the IPAM reports plus the pods it cannot list
// yet (docs/failure-and-recovery.md "When is an IP free again"). A report can only
// add to the count without it, never take from it: a hold stays until it
// ends, since a report the mirror wrote before the force delete cannot
// show the IP the pod still holds.
func Charged(ch Charges, r IPAMReport) int64 {
	own := ch.Pods + ch.Held
	if r.Reported {
		return max(own, r.Used+ch.Unlisted)
	}
	return own
}

// Beyond is what Charged counts beyond the pods: the holds, or what the
// IPAM reports beyond the pods it can list.
func Beyond(ch Charges, r IPAMReport) int64 { return Charged(ch, r) - ch.Pods }

// Free is the IPs left on a node of capacity c: its capacity less
// Charged, never negative. Every mode calls it (the plugin's filter and
// score, the extender's ledger, native mode's publisher, the workload
// API's maximum, `kubectl capscale ips`).
func Free(c Capacity, ch Charges) int64 {
	return max(0, c.IPs-Charged(ch, c.IPAM))
}
