package underlay

import "github.com/capscale/capscale/internal/names"

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
