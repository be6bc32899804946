package capacitysource

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/capscale/capscale/internal/underlay"
)

// UsedFrom is where a source reads the IPs its IPAM reports in use when
// the source's own objects do not say: a second resource, joined to the
// nodes by its own node expression. whereabouts keeps a node's capacity
// in one NodeSlicePool for all nodes and what it handed out on the node in
// that node's IPPool.
type UsedFrom struct {
	// Resource is the IPAM's resource that reports use.
	Resource *Resource `json:"resource,omitempty"`
	// Namespace restricts a namespaced resource to one namespace; empty
	// watches every namespace. A preset's usedFrom takes the source's.
	Namespace string `json:"namespace,omitempty"`
	// Node is a CEL expression over object: the node (a string, "" for
	// none) or the nodes (a list of strings) whose use the object reports.
	Node string `json:"node,omitempty"`
	// Used is a CEL expression over object: the IPs in use it reports, an
	// int from 0 to 1048576.
	Used string `json:"used,omitempty"`
	// Key, optional with SourceKey, is a CEL expression over object (the
	// usedFrom object): its key, a string, or a map from each node it maps
	// to, to its key for that node. With it, an object counts for a node
	// only if its key there is one SourceKey gives: an IPAM that keeps
	// several networks' use on one node (whereabouts: one IPPool per
	// network and node) is read for the network the source counts.
	Key string `json:"key,omitempty"`
	// SourceKey, set with Key, is a CEL expression over object (the
	// source's object): the key (a string) or keys (a list of strings) of
	// the usedFrom objects that count for the nodes it maps to. It is one
	// value per source object, never per node: an object that lists every
	// node (a NodeSlicePool) would otherwise pay per node within one
	// evaluation's cost limit.
	SourceKey string `json:"sourceKey,omitempty"`
}

// CompiledUsedFrom is a UsedFrom ready to run.
type CompiledUsedFrom struct {
	Resource  Resource
	Namespace string
	Node      *Expression
	Used      *Expression
	// Key and SourceKey are nil when the source does not join by key.
	Key, SourceKey *Expression
}

// validateUsedFrom checks an expanded source's usedFrom: a resource, both
// expressions, and not beside used (which of the two the IPAM means is the
// operator's call).
func (s *Source) validateUsedFrom(p *field.Path) field.ErrorList {
	u := s.UsedFrom
	if u == nil {
		return nil
	}
	p = p.Child("usedFrom")
	var errs field.ErrorList
	if s.Used != "" {
		errs = append(errs, field.Forbidden(p, "a source reads its IPs in use from its own objects (used) or from a second resource (usedFrom), not both"))
	}
	errs = append(errs, validateWatched(p, u.Resource, u.Namespace, "the group, version and resource whose objects report the IPs in use")...)
	if u.Node == "" {
		errs = append(errs, field.Required(p.Child("node"), "a CEL expression naming the node (or nodes) whose IPs in use an object reports"))
	}
	if u.Used == "" {
		errs = append(errs, field.Required(p.Child("used"), "a CEL expression giving the IPs in use an object reports"))
	}
	// A key on one side alone joins nothing: say which one is missing.
	switch {
	case u.Key != "" && u.SourceKey == "":
		errs = append(errs, field.Required(p.Child("sourceKey"),
			"usedFrom.key is set: a CEL expression over the source's object giving the key or keys of the usedFrom objects that count for its nodes"))
	case u.Key == "" && u.SourceKey != "":
		errs = append(errs, field.Required(p.Child("key"),
			"usedFrom.sourceKey is set: a CEL expression over the usedFrom object giving its key, or a map of node names to its key there"))
	}
	return errs
}

// compileUsedFrom compiles s.UsedFrom; nil gives nil.
func compileUsedFrom(u *UsedFrom, limit uint64) (*CompiledUsedFrom, error) {
	if u == nil {
		return nil, nil
	}
	node, err := compile(u.Node, cel.StringType, limit)
	if err != nil {
		return nil, fmt.Errorf("usedFrom.node: %w", err)
	}
	used, err := compile(u.Used, cel.IntType, limit)
	if err != nil {
		return nil, fmt.Errorf("usedFrom.used: %w", err)
	}
	c := &CompiledUsedFrom{Resource: *u.Resource, Namespace: u.Namespace, Node: node, Used: used}
	if u.Key == "" {
		return c, nil
	}
	if c.Key, err = compile(u.Key, cel.StringType, limit); err != nil {
		var mapErr error
		if c.Key, mapErr = compile(u.Key, cel.MapType(cel.StringType, cel.DynType), limit); mapErr != nil {
			return nil, fmt.Errorf("usedFrom.key: %w", orWant(err, "a map of node names to keys"))
		}
	}
	// A string or a list of strings, as a node expression.
	if c.SourceKey, err = compile(u.SourceKey, cel.StringType, limit); err != nil {
		return nil, fmt.Errorf("usedFrom.sourceKey: %w", orWant(err, "a list of strings"))
	}
	return c, nil
}

// orWant adds to a compile error that an expression gives the wrong type
// the other type it may give.
func orWant(err error, other string) error {
	if strings.HasPrefix(err.Error(), "gives ") {
		return fmt.Errorf("%w or %s", err, other)
	}
	return err
}

// UsedResult is what one usedFrom object says: the nodes it maps to and
// the IPs in use it reports, or why it gives none. The usedFrom informer
// keeps only this of each object.
type UsedResult struct {
	// Ref names the object as Result.Ref does.
	Ref string
	// Nodes are the nodes the object maps to.
	Nodes []string
	// NodeErr says why the node expression gave no node.
	NodeErr string
	// Used is the IPs in use when Err is "".
	Used int64
	// Key is the object's key when the source joins by key and its key
	// expression gives one string; KeyByNode its key for each node when
	// the expression gives a map. KeyErr says why it gave neither.
	Key       string
	KeyByNode map[string]string
	KeyErr    string
	// noKey: ForNode found no key for the node in KeyByNode.
	noKey bool
	// Err says why the object gives no count.
	Err string
}

// EvaluateUsedFrom runs a usedFrom's expressions on one object.
func EvaluateUsedFrom(u *CompiledUsedFrom, namespace, name string, obj map[string]any) UsedResult {
	r := UsedResult{Ref: objectRef(u.Resource, namespace, name)}
	nodes, _, err := u.Node.NodeNames(obj)
	if err != nil {
		r.NodeErr = fmt.Sprintf("usedFrom.node expression: %v", err)
		return r
	}
	r.Nodes = nodes
	// The key first: an object of another pool whose count fails is left
	// out by its key, not charged to the node as invalid.
	if u.Key != nil {
		if r.Key, r.KeyByNode, err = u.Key.Key(obj); err != nil {
			r.KeyErr = fmt.Sprintf("usedFrom.key expression: %v", err)
		}
	}
	if r.Used, err = u.Used.Count(obj); err != nil {
		r.Used, r.Err = 0, fmt.Sprintf("usedFrom.used expression: %v", err)
	}
	return r
}

// ForNode is o as it counts for node: with a key per node, the key there;
// where the map does not name the node, no key, so that it counts for no
// key the source gives ("" included).
func (o UsedResult) ForNode(node string) UsedResult {
	if o.KeyByNode != nil {
		o.Key, o.noKey = o.KeyByNode[node], !hasKey(o.KeyByNode, node)
		o.KeyByNode = nil
	}
	return o
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// Join is what a node's covering object says of the usedFrom objects that
// count for the node.
type Join struct {
	// Keyed: only objects whose key is in Keys count; otherwise every
	// object that maps to the node does.
	Keyed bool
	Keys  []string
	// Err says why the covering object gives no keys.
	Err string
}

// evaluateSourceKeys runs a source's usedFrom.sourceKey, if it has one,
// into r.
func evaluateSourceKeys(s *Compiled, obj map[string]any, r *Result) {
	if s.UsedFrom == nil || s.UsedFrom.SourceKey == nil || r.Err != "" {
		return
	}
	keys, err := s.UsedFrom.SourceKey.Keys(obj)
	if err != nil {
		r.UsedKeysErr = fmt.Sprintf("usedFrom.sourceKey expression: %v", err)
		return
	}
	r.UsedKeys = keys
}

// JoinFor is the Join r gives its nodes, for a source that joins by key
// when keyed.
func (r Result) JoinFor(keyed bool) Join {
	switch {
	case !keyed:
		return Join{}
	case r.UsedKeysErr != "":
		return Join{Keyed: true, Err: r.UsedKeysErr}
	}
	return Join{Keyed: true, Keys: r.UsedKeys}
}

// WithUsedFrom is m, the mirror of a node whose covering source reads its
// IPs in use from usedFrom, with the used figure of objs, the usedFrom
// objects that map to the node:
//   - none: 0. An IPAM that keeps a node's use in an object of its own
//     makes it at the node's first allocation (whereabouts v0.9.2:
//     pkg/storage/kubernetes/ipam.go:136-161 creates the IPPool, empty,
//     when the first CNI ADD on the node finds none), so before that it
//     holds nothing there.
//   - several: their sum. Each IP an object lists is held until the IPAM
//     lets it go, whichever object lists it. A source whose objects of
//     several pools map to one node says which count with a key join
//     (below); without one, a sum can only over-charge, where treating it
//     as invalid would hold the node at 0.
//   - one that fails: the used figure is invalid, with the reason, and the
//     rule makes the node invalid (a node whose IPAM cannot say what it
//     holds is not counted as holding nothing).
//
// With a key join (j.Keyed), only the objects whose key is one of j.Keys
// count: whereabouts keeps each network's use on a node in an IPPool of its
// own, and the NodeSlicePool a source reads is one network's. A join that
// fails makes the used figure invalid.
//
// A node the source does not cover, or whose capacity is invalid, keeps m.
func WithUsedFrom(m Mirror, j Join, objs []UsedResult) Mirror {
	if m.Value == "" || m.Invalid() {
		return m
	}
	if j.Err != "" {
		m.Used = underlay.InvalidPrefix + j.Err
		return m
	}
	objs = slices.DeleteFunc(append([]UsedResult(nil), objs...), func(o UsedResult) bool {
		// An object whose key failed stays: it may be this node's.
		return j.Keyed && o.KeyErr == "" && (o.noKey || !slices.Contains(j.Keys, o.Key))
	})
	sort.Slice(objs, func(i, j int) bool { return objs[i].Ref < objs[j].Ref })
	var sum int64
	for _, o := range objs {
		if j.Keyed && o.KeyErr != "" {
			m.Used = underlay.InvalidPrefix + o.Ref + ": " + o.KeyErr
			return m
		}
		if o.Err != "" {
			m.Used = underlay.InvalidPrefix + o.Ref + ": " + o.Err
			return m
		}
		sum += o.Used
	}
	if sum > underlay.MaxCapacity {
		m.Used = underlay.InvalidPrefix + fmt.Sprintf("%d objects report %d IPs in use, more than %d", len(objs), sum, underlay.MaxCapacity)
		return m
	}
	m.Used = strconv.FormatInt(sum, 10)
	return m
}

// Read is a resource an expanded source reads, and the namespace it reads
// it in ("" for all): what its RBAC must grant.
type Read struct {
	Resource  Resource
	Namespace string
}

// Reads lists what an expanded source reads: its resource, then its
// usedFrom's.
func (s Source) Reads() []Read {
	var out []Read
	if s.Resource != nil {
		out = append(out, Read{Resource: *s.Resource, Namespace: s.Namespace})
	}
	if s.UsedFrom != nil && s.UsedFrom.Resource != nil {
		out = append(out, Read{Resource: *s.UsedFrom.Resource, Namespace: s.UsedFrom.Namespace})
	}
	return out
}
