package underlay

import (
	"fmt"
	"strings"

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

// Charged is what the rule counts as taken on a node: the larger of what
// its pods hold (bound, assumed, reserved) and what its IPAM reports in use
// when the IPAM reports it; otherwise what the pods hold plus what
// force-deleted pods may still hold there (held, hold.go). An IP is free
// only once both the pods and the IPAM agree it is: a pod deleted with
// --grace-period=0 --force leaves the API before its node has given its IP
// back to the IPAM (docs/scheduling.md "When is an IP free again").
func Charged(pods, held int64, r IPAMReport) int64 {
	if r.Reported {
		return max(pods, r.Used)
	}
	return pods + held
}

// Free is the IPs left on a node of capacity c: its capacity less
// Charged, never negative. Every mode calls it (the plugin's filter and
// score, the extender's ledger, native mode's publisher, the workload
// API's maximum, `kubectl capscale ips`).
func Free(c Capacity, pods, held int64) int64 {
	return max(0, c.IPs-Charged(pods, held, c.IPAM))
}
