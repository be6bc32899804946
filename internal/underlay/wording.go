package underlay

import (
	"strconv"

	"github.com/capscale/capscale/internal/names"
)

// The capacity rule in words: the one wording of the help texts (kubectl
// capscale, the extender's flags) and of the chart's NOTES.txt and
// values.yaml (deploy/'s TestCapacityRuleWording keeps those equal). The
// precedence is Capacity's: annotation, capacity source, label, default.
const (
	// CapacityRuleText states the rule.
	CapacityRuleText = "a node's capacity is its " + names.UnderlayIPCapacityAnnotation + " annotation, else what its capacity source reports (mirrored to " +
		names.UnderlayIPSourceCapacityAnnotation + "), else its " + names.UnderlayIPCapacityAnnotation +
		" label, else the default; an invalid value counts 0, never the default"
	// DefaultCapacityText says which nodes the default capacity is for.
	DefaultCapacityText = "underlay IP capacity of a node with no " + names.UnderlayIPCapacityAnnotation +
		" annotation, no capacity source and no label of that name"
)

// BeyondPods says, for a full node's reason, what the rule charges there
// beyond what the pods hold: IPs the IPAM reports in use beyond them, or
// IPs held for force-deleted pods; "" when nothing. The plugin's and the
// extender's reasons both end with it.
func BeyondPods(ch Charges, r IPAMReport) string {
	ipam := r.Used + ch.Unlisted
	switch {
	case r.Reported && ipam > ch.Pods && ipam >= ch.Pods+ch.Held && ch.Unlisted > 0:
		return " (the IPAM reports " + itoa(r.Used) + " in use, and " + itoa(ch.Unlisted) + " of the pods' " + itoa(ch.Pods) + " have no IP yet)"
	case r.Reported && ipam > ch.Pods && ipam >= ch.Pods+ch.Held:
		return " (the IPAM reports " + itoa(r.Used) + " in use, the pods hold " + itoa(ch.Pods) + ")"
	case ch.Held > 0:
		return " (" + itoa(ch.Held) + " held for force-deleted pods until their node can have released them)"
	}
	return ""
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
