package capacitysource

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// The mirror's decisions, as plain functions over plain values; mirror.go
// reads the informers, calls them and writes what they decide.

// Result is what one object of a source says: the node it maps to and its
// capacity, or why it gives none. The source's informer keeps only this of
// each object (Evaluate runs once per object change).
type Result struct {
	// Ref names the object: resource.group/name, or
	// resource.group/namespace/name.
	Ref string
	// Node is the node the object maps to; "" for none.
	Node string
	// Nodes, when the node expression names a list, are the nodes the
	// object maps to, each with the object's capacity: an IPAM object that
	// lists every node's share, as whereabouts' NodeSlicePool does. Node
	// is then "".
	Nodes []string
	// NodeErr says why the node expression gave no node.
	NodeErr string
	// Capacity is the node's underlay IPs when Err is "".
	Capacity int64
	// Err says why the object gives no capacity.
	Err string

	// MaxCapacity is what the node's pool may grow to, when MaxKnown
	// (the source has a maxCapacity and the object says); MaxErr says why
	// the expression failed. Information only.
	MaxCapacity int64
	MaxKnown    bool
	MaxErr      string

	// Used is what the object reports in use when HasUsed and UsedErr is
	// "" (the source's used expression); UsedErr says why it gives none.
	Used    int64
	HasUsed bool
	UsedErr string

	// UsedKeys are, when the source's usedFrom joins by key, the keys of
	// the usedFrom objects that count for the object's nodes
	// (usedFrom.sourceKey); UsedKeysErr says why the expression gave none.
	UsedKeys    []string
	UsedKeysErr string
}

// Evaluate runs a source's expressions on one object.
func Evaluate(s *Compiled, namespace, name string, obj map[string]any) Result {
	r := Result{Ref: objectRef(s.Resource, namespace, name)}
	nodes, list, err := s.Node.NodeNames(obj)
	if err != nil {
		r.NodeErr = fmt.Sprintf("node expression: %v", err)
		return r
	}
	switch {
	case list:
		r.Nodes = nodes
	case len(nodes) == 1:
		r.Node = nodes[0]
	}
	if r.Capacity, err = s.Capacity.Count(obj); err != nil {
		r.Capacity, r.Err = 0, fmt.Sprintf("capacity expression: %v", err)
	}
	if s.MaxCapacity != nil {
		if r.MaxCapacity, r.MaxKnown, err = s.MaxCapacity.MaxCount(obj); err != nil {
			r.MaxErr = fmt.Sprintf("maxCapacity expression: %v", err)
		}
	}
	evaluateUsed(s, obj, &r)
	evaluateSourceKeys(s, obj, &r)
	return r
}

// maxValue is the max-capacity annotation's value for o: "" for none.
func maxValue(o Result) string {
	switch {
	case o.MaxErr != "":
		return underlay.InvalidPrefix + o.MaxErr
	case o.MaxKnown:
		return strconv.FormatInt(o.MaxCapacity, 10)
	}
	return ""
}

// MapsTo lists the nodes the object maps to: Node, or Nodes.
func (r Result) MapsTo() []string {
	if r.Node != "" {
		return []string{r.Node}
	}
	return r.Nodes
}

// Equal reports whether r and o say the same (Result holds a slice, so ==
// does not compare it).
func (r Result) Equal(o Result) bool { return reflect.DeepEqual(r, o) }

// Coverage is what one source says of one node.
type Coverage struct {
	// Source and Resource name the source and its resource.
	Source, Resource string
	// Selects: the source has a nodeSelector; Selected: it matches the
	// node.
	Selects, Selected bool
	// Objects are the source's objects that map to the node.
	Objects []Result
	// Draws is the source's draws field (underlay.DrawsAll or DrawsMarked).
	Draws string
}

// Covers reports whether the source decides the node's capacity: with a
// nodeSelector, exactly the nodes it selects (an object that maps to
// another node is not this source's business, so two sources may share a
// resource over disjoint nodes); without one, the nodes its objects map
// to. Want gives a selector-less source also the nodes that nothing else
// covers (awaiting).
func (c Coverage) Covers() bool {
	if c.Selects {
		return c.Selected
	}
	return len(c.Objects) > 0
}

// Mirror is what the mirror writes onto a node: the value of
// capscale.io/underlay-ip-source-capacity (an integer, or
// underlay.InvalidPrefix and why) and of capscale.io/underlay-ip-source
// (the source and the object). The zero Mirror means neither annotation.
type Mirror struct {
	Value, Origin string
	// Max is the value of capscale.io/underlay-ip-source-max-capacity
	// (an integer or underlay.InvalidPrefix and why); "" for none.
	Max string
	// Draws is the value of capscale.io/underlay-ip-draws: which pods take
	// an IP from the node's pool ("" removes it).
	Draws string
	// Used is the value of capscale.io/underlay-ip-source-used (an
	// integer, or underlay.InvalidPrefix and why); "" for none.
	Used string
}

// Uncovered is the mirror of a node no source covers: no value, no draws,
// and the mark capscale.io/underlay-ip-source: none, which tells the rule
// (underlay.Rule.AwaitSource) that the node was read and takes the label
// or the default.
var Uncovered = Mirror{Origin: names.UnderlayIPSourceNone}

// Invalid reports whether m marks the node's capacity invalid.
func (m Mirror) Invalid() bool { return strings.HasPrefix(m.Value, underlay.InvalidPrefix) }

// Want decides a node's mirror from what each source says of it (see
// Coverage.Covers for which sources cover it). None: the node awaits the
// object of a source without a nodeSelector (awaiting), or, with no such
// source, nothing to mirror. Two or more: invalid, since which one
// holds the truth is the operator's call, not capscale's. One: its one
// object's capacity; no object, several objects, or an object without a
// capacity is invalid with the reason — never the label or the default,
// which would let a missing IPAM object pass for IPs that exist.
func Want(cov []Coverage) Mirror {
	var covering []Coverage
	for _, c := range cov {
		if c.Covers() {
			covering = append(covering, c)
		}
	}
	switch len(covering) {
	case 0:
		return awaiting(cov)
	case 1:
	default:
		srcs := make([]string, len(covering))
		for i, c := range covering {
			srcs[i] = c.Source
		}
		return Mirror{Value: underlay.InvalidPrefix + "covered by more than one capacity source: " + strings.Join(srcs, ", "),
			Origin: strings.Join(srcs, ","), Draws: drawsOf(covering)}
	}
	c := covering[0]
	switch len(c.Objects) {
	case 0:
		return Mirror{Value: underlay.InvalidPrefix + "no " + c.Resource + " object maps to this node", Origin: c.Source, Draws: c.Draws}
	case 1:
	default:
		refs := make([]string, len(c.Objects))
		for i, o := range c.Objects {
			refs[i] = o.Ref
		}
		sort.Strings(refs)
		return Mirror{Value: underlay.InvalidPrefix + strconv.Itoa(len(refs)) + " objects map to this node: " + strings.Join(refs, ", "),
			Origin: c.Source, Draws: c.Draws}
	}
	o := c.Objects[0]
	origin := c.Source + " " + o.Ref
	if o.Err != "" {
		return Mirror{Value: underlay.InvalidPrefix + o.Err, Origin: origin, Max: maxValue(o), Draws: c.Draws, Used: usedValue(o)}
	}
	return Mirror{Value: strconv.FormatInt(o.Capacity, 10), Origin: origin, Max: maxValue(o), Draws: c.Draws, Used: usedValue(o)}
}

// awaiting is the mirror of a node that no source covers by its selector
// or its objects: a source without a nodeSelector covers it too, and the
// node waits, invalid, for that source's object, since an IPAM names a
// node only some time after it joins (the Cilium agent creates its
// CiliumNode at start; whereabouts slices a node once it sees it). Taking
// the label or the default meanwhile is the window issue 49 §4 closes.
// No selector-less source: nothing to mirror (the mark none).
func awaiting(cov []Coverage) Mirror {
	var srcs []Coverage
	var names []string
	for _, c := range cov {
		if !c.Selects {
			srcs, names = append(srcs, c), append(names, c.Source)
		}
	}
	switch len(srcs) {
	case 0:
		return Mirror{}
	case 1:
		c := srcs[0]
		return Mirror{Value: underlay.InvalidPrefix + "no " + c.Resource + " object maps to this node", Origin: c.Source, Draws: c.Draws}
	}
	return Mirror{Value: underlay.InvalidPrefix + "no object of the capacity sources " + strings.Join(names, ", ") + " maps to this node",
		Origin: strings.Join(names, ","), Draws: drawsOf(srcs)}
}

// drawsOf is what several sources covering one node say of its pods: all
// if any says so (the capacity is invalid then anyway; counting more pods
// errs on the safe side).
func drawsOf(covering []Coverage) string {
	d := ""
	for _, c := range covering {
		if c.Draws == underlay.DrawsAll {
			return c.Draws
		}
		if c.Draws != "" {
			d = c.Draws
		}
	}
	return d
}

// Current is the mirror a node carries now.
func Current(annotations map[string]string) Mirror {
	return Mirror{Value: annotations[names.UnderlayIPSourceCapacityAnnotation], Origin: annotations[names.UnderlayIPSourceAnnotation],
		Max: annotations[names.UnderlayIPSourceMaxCapacityAnnotation], Draws: annotations[names.UnderlayIPDrawsAnnotation],
		Used: annotations[names.UnderlayIPSourceUsedAnnotation]}
}

// mirrorKeys are the annotations the mirror writes.
var mirrorKeys = []string{names.UnderlayIPSourceCapacityAnnotation, names.UnderlayIPSourceAnnotation,
	names.UnderlayIPSourceMaxCapacityAnnotation, names.UnderlayIPDrawsAnnotation, names.UnderlayIPSourceUsedAnnotation}

// annotations is m as the values of mirrorKeys, "" for one it removes.
func (m Mirror) annotations() []string { return []string{m.Value, m.Origin, m.Max, m.Draws, m.Used} }

// Over is annotations with the mirror's annotations as m says, the others
// kept: what a reader of the IPAM's objects hands the rule in place of the
// Node's own (the Node may carry an older mirror). annotations is not
// modified.
func (m Mirror) Over(annotations map[string]string) map[string]string {
	out := make(map[string]string, len(annotations)+len(mirrorKeys))
	for k, v := range annotations {
		out[k] = v
	}
	for i, v := range m.annotations() {
		if v == "" {
			delete(out, mirrorKeys[i])
			continue
		}
		out[mirrorKeys[i]] = v
	}
	return out
}

// has reports whether the node carries any of the mirror's annotations.
func has(annotations map[string]string) bool {
	for _, k := range mirrorKeys {
		if _, ok := annotations[k]; ok {
			return true
		}
	}
	return false
}

// PatchFor is the JSON merge patch that gives a node with annotations the
// mirror want, or nil when it has it already: IPAM objects change status
// often (a pod's IP used or released), and a Node is patched only when its
// value, origin, max capacity, draws or IPAM use changes. A field of want that is ""
// removes its annotation where the node has it; the zero Mirror removes
// them all.
func PatchFor(annotations map[string]string, want Mirror) []byte {
	set := AnnotationChanges(annotations, want)
	if set == nil {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	return b
}

// AnnotationChanges is PatchFor's annotations: each of the mirror's
// annotations want sets (its value) or removes where the node has it
// (nil), or nil when the node has the mirror already. Native mode's
// publisher, reading the sources itself, writes them in its own Node
// status patch (extender/publisher).
func AnnotationChanges(annotations map[string]string, want Mirror) map[string]any {
	changed := false
	set := make(map[string]any, len(mirrorKeys))
	for i, v := range want.annotations() {
		k := mirrorKeys[i]
		cur, ok := annotations[k]
		if v == "" {
			// Removed only where the node carries it: the patch says no
			// more than the change.
			if ok {
				set[k], changed = nil, true
			}
			continue
		}
		set[k] = v
		changed = changed || !ok || cur != v
	}
	if !changed {
		return nil
	}
	return set
}

// evaluateUsed runs a source's used expression, if it has one, into r.
func evaluateUsed(s *Compiled, obj map[string]any, r *Result) {
	if s.Used == nil || r.Err != "" {
		return
	}
	r.HasUsed = true
	used, err := s.Used.Count(obj)
	if err != nil {
		r.UsedErr = fmt.Sprintf("used expression: %v", err)
		return
	}
	r.Used = used
}

// usedValue is the used annotation's value for one object's result.
func usedValue(o Result) string {
	switch {
	case !o.HasUsed:
		return ""
	case o.UsedErr != "":
		return underlay.InvalidPrefix + o.UsedErr
	}
	return strconv.FormatInt(o.Used, 10)
}
