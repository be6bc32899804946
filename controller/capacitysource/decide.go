package capacitysource

import (
	"encoding/json"
	"fmt"
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
	// NodeErr says why the node expression gave no node.
	NodeErr string
	// Capacity is the node's underlay IPs when Err is "".
	Capacity int64
	// Err says why the object gives no capacity.
	Err string
	// Used is what the object reports in use when HasUsed and UsedErr is
	// "" (the source's used expression); UsedErr says why it gives none.
	Used    int64
	HasUsed bool
	UsedErr string
}

// Evaluate runs a source's expressions on one object.
func Evaluate(s *Compiled, namespace, name string, obj map[string]any) Result {
	r := Result{Ref: s.Resource.String() + "/" + name}
	if namespace != "" {
		r.Ref = s.Resource.String() + "/" + namespace + "/" + name
	}
	node, err := s.Node.NodeName(obj)
	if err != nil {
		r.NodeErr = fmt.Sprintf("node expression: %v", err)
		return r
	}
	r.Node = node
	if r.Capacity, err = s.Capacity.Count(obj); err != nil {
		r.Capacity, r.Err = 0, fmt.Sprintf("capacity expression: %v", err)
	}
	evaluateUsed(s, obj, &r)
	return r
}

// Coverage is what one source says of one node.
type Coverage struct {
	// Source and Resource name the source and its resource.
	Source, Resource string
	// Selects: the source has a nodeSelector; Selected: it matches the
	// node.
	Selects, Selected bool
	// Objects are the source's objects that map to the node.
	Objects []Result
}

// Covers reports whether the source decides the node's capacity: with a
// nodeSelector, exactly the nodes it selects (an object that maps to
// another node is not this source's business, so two sources may share a
// resource over disjoint nodes); without one, the nodes its objects map
// to.
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
	// Used is the value of capscale.io/underlay-ip-source-used (an
	// integer, or underlay.InvalidPrefix and why); "" for none.
	Used string
}

// Invalid reports whether m marks the node's capacity invalid.
func (m Mirror) Invalid() bool { return strings.HasPrefix(m.Value, underlay.InvalidPrefix) }

// Want decides a node's mirror from what each source says of it (see
// Coverage.Covers for which sources cover it). No source: nothing to
// mirror. Two or more: invalid, since which one
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
		return Mirror{}
	case 1:
	default:
		srcs := make([]string, len(covering))
		for i, c := range covering {
			srcs[i] = c.Source
		}
		return Mirror{Value: underlay.InvalidPrefix + "covered by more than one capacity source: " + strings.Join(srcs, ", "),
			Origin: strings.Join(srcs, ",")}
	}
	c := covering[0]
	switch len(c.Objects) {
	case 0:
		return Mirror{Value: underlay.InvalidPrefix + "no " + c.Resource + " object maps to this node", Origin: c.Source}
	case 1:
	default:
		refs := make([]string, len(c.Objects))
		for i, o := range c.Objects {
			refs[i] = o.Ref
		}
		sort.Strings(refs)
		return Mirror{Value: underlay.InvalidPrefix + strconv.Itoa(len(refs)) + " objects map to this node: " + strings.Join(refs, ", "),
			Origin: c.Source}
	}
	o := c.Objects[0]
	origin := c.Source + " " + o.Ref
	if o.Err != "" {
		return Mirror{Value: underlay.InvalidPrefix + o.Err, Origin: origin}
	}
	return Mirror{Value: strconv.FormatInt(o.Capacity, 10), Origin: origin, Used: usedValue(o)}
}

// Current is the mirror a node carries now.
func Current(annotations map[string]string) Mirror {
	return Mirror{Value: annotations[names.UnderlayIPSourceCapacityAnnotation], Origin: annotations[names.UnderlayIPSourceAnnotation],
		Used: annotations[names.UnderlayIPSourceUsedAnnotation]}
}

// has reports whether the node carries either annotation.
func has(annotations map[string]string) bool {
	_, v := annotations[names.UnderlayIPSourceCapacityAnnotation]
	_, o := annotations[names.UnderlayIPSourceAnnotation]
	_, u := annotations[names.UnderlayIPSourceUsedAnnotation]
	return v || o || u
}

// PatchFor is the JSON merge patch that gives a node with annotations the
// mirror want, or nil when it has it already: IPAM objects change status
// often (a pod's IP used or released), and a Node is patched only when its
// value or origin changes. The zero Mirror removes both annotations.
func PatchFor(annotations map[string]string, want Mirror) []byte {
	if want == (Mirror{}) {
		if !has(annotations) {
			return nil
		}
	} else if cur := Current(annotations); cur == want && has(annotations) {
		return nil
	}
	set := func(v string) any {
		if want == (Mirror{}) {
			return nil
		}
		return v
	}
	patch := map[string]any{
		names.UnderlayIPSourceCapacityAnnotation: set(want.Value),
		names.UnderlayIPSourceAnnotation:         set(want.Origin),
	}
	addUsed(patch, annotations, want.Used)
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": patch}})
	return b
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

// addUsed puts the used annotation into a patch of annotations: its
// value, null to remove one the node carries (no source, or a source
// without used), nothing when neither.
func addUsed(patch map[string]any, annotations map[string]string, used string) {
	_, had := annotations[names.UnderlayIPSourceUsedAnnotation]
	switch {
	case used != "":
		patch[names.UnderlayIPSourceUsedAnnotation] = used
	case had:
		patch[names.UnderlayIPSourceUsedAnnotation] = nil
	}
}
