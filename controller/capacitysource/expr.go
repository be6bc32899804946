package capacitysource

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/capscale/capscale/internal/underlay"
)

// ObjectVariable is the name the expressions read the source's object by.
const ObjectVariable = "object"

// CostLimit bounds one evaluation, in CEL's cost units: the per-call limit
// kube-apiserver gives a validation rule or an admission policy expression
// (roughly 0.1 s of CPU). An expression that walks a large object past it
// fails, and the node it decides is invalid.
const CostLimit = celconfig.PerCallLimit

// env is the CEL environment of every expression: Kubernetes' base
// environment (k8s.io/apiserver/pkg/cel/environment, the one CRD
// validation rules and admission policies compile in, with its libraries:
// lists, strings, sets, regex, quantity, ip and cidr, optional types) at the
// compatibility version of this build, plus the variable object (the
// source's object, of no declared schema: a CRD's schema is the IPAM's and
// may change under capscale), cel-go's math extension, for
// math.bitShiftLeft (the address count of a CIDR is 2 to the power of its
// host bits, and no Kubernetes library raises a power) and math.least, and
// its bindings extension, for cel.bind (a preset names a list it reads
// twice).
var env = sync.OnceValues(func() (*cel.Env, error) {
	set, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable(ObjectVariable, cel.DynType),
			ext.Math(ext.MathVersion(2)),
			ext.Bindings(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	return set.NewExpressionsEnv(), nil
})

// Expression is one compiled CEL expression over object.
type Expression struct {
	// Source is the expression as written.
	Source string
	prg    cel.Program
}

// compile compiles src, which must give a value of type want or of a type
// known only when it runs (dyn: any field of object), and prepares it to
// run within limit.
func compile(src string, want *cel.Type, limit uint64) (*Expression, error) {
	e, err := env()
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty expression")
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if out := ast.OutputType(); !gives(out, want) {
		return nil, fmt.Errorf("gives %s, want %s", out, want)
	}
	prg, err := e.Program(ast, cel.CostLimit(limit))
	if err != nil {
		return nil, err
	}
	return &Expression{Source: src, prg: prg}, nil
}

// gives reports whether an expression of type out may give want. A count
// may be an int or a uint (Count bounds it); a node may be a list of
// nodes; anything may be dyn, the type
// of any field of object, checked when it runs; an optional count's value
// likewise.
func gives(out, want *cel.Type) bool {
	if out.IsExactType(want) || out.IsExactType(cel.DynType) || (want == cel.IntType && out.IsExactType(cel.UintType)) {
		return true
	}
	// A node (a string) may also be a list of nodes (NodeNames checks its
	// elements).
	if want == cel.StringType && out.Kind() == types.ListKind {
		return true
	}
	// A map of keys by node (usedFrom.key) is checked entry by entry when
	// it runs (Key).
	if want.Kind() == types.MapKind && out.Kind() == types.MapKind {
		return true
	}
	if want.Kind() == types.OpaqueKind && want.TypeName() == "optional_type" {
		if out.Kind() == types.OpaqueKind && out.TypeName() == "optional_type" {
			return gives(out.Parameters()[0], want.Parameters()[0])
		}
		return gives(out, want.Parameters()[0])
	}
	return false
}

// eval runs the expression on obj (an object as the dynamic client decodes
// it: maps, slices, strings, int64, float64, bool).
func (x *Expression) eval(obj map[string]any) (ref.Val, error) {
	v, _, err := x.prg.Eval(map[string]any{ObjectVariable: obj})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Count runs a capacity expression on obj: a whole number of underlay IPs
// from 0 to underlay.MaxCapacity. Anything else is an error that says what
// the expression gave, so the node is invalid with that reason: a
// negative or fractional count, a string (even "10"), a number too large.
func (x *Expression) Count(obj map[string]any) (int64, error) {
	v, err := x.eval(obj)
	if err != nil {
		return 0, err
	}
	return count(v)
}

// MaxCount runs a maxCapacity expression on obj: a count as Count gives
// it, or, from an optional, none (ok false) when the object does not say.
func (x *Expression) MaxCount(obj map[string]any) (n int64, ok bool, err error) {
	v, err := x.eval(obj)
	if err != nil {
		return 0, false, err
	}
	if o, isOpt := v.(*types.Optional); isOpt {
		if !o.HasValue() {
			return 0, false, nil
		}
		v = o.GetValue()
	}
	n, err = count(v)
	return n, err == nil, err
}

// count is a CEL value as a whole number of underlay IPs.
func count(v ref.Val) (int64, error) {
	var n int64
	switch t := v.(type) {
	case types.Int:
		n = int64(t)
	case types.Uint:
		if uint64(t) > math.MaxInt64 {
			return 0, fmt.Errorf("larger than %d: %d", underlay.MaxCapacity, uint64(t))
		}
		n = int64(t)
	case types.Double:
		return 0, fmt.Errorf("not an integer: %v (a double; a count is an int: use int() if it is whole)", float64(t))
	default:
		return 0, fmt.Errorf("gives %s %s, want an int", v.Type().TypeName(), short(v))
	}
	switch {
	case n < 0:
		return 0, fmt.Errorf("negative: %d", n)
	case n > underlay.MaxCapacity:
		return 0, fmt.Errorf("larger than %d: %d", underlay.MaxCapacity, n)
	}
	return n, nil
}

// NodeNames runs a node expression on obj. A string names one node ("" for
// none); a list of strings (list reports it) names every node the object
// maps to — an object that lists each node's share, as whereabouts'
// NodeSlicePool does — with empty entries (a share no node has) and repeats
// left out. Anything else is an error.
func (x *Expression) NodeNames(obj map[string]any) (nodes []string, list bool, err error) {
	v, err := x.eval(obj)
	if err != nil {
		return nil, false, err
	}
	switch t := v.(type) {
	case types.String:
		if t == "" {
			return nil, false, nil
		}
		return []string{string(t)}, false, nil
	case traits.Lister:
		seen := map[string]bool{}
		for it := t.Iterator(); it.HasNext() == types.True; {
			e := it.Next()
			s, ok := e.(types.String)
			if !ok {
				return nil, true, fmt.Errorf("gives a list with %s %s, want a list of strings", e.Type().TypeName(), short(e))
			}
			if s != "" && !seen[string(s)] {
				seen[string(s)] = true
				nodes = append(nodes, string(s))
			}
		}
		sort.Strings(nodes)
		return nodes, true, nil
	}
	return nil, false, fmt.Errorf("gives %s %s, want a string or a list of strings", v.Type().TypeName(), short(v))
}

// Key runs a usedFrom.key expression on obj: one key (a string), or a map
// from a node's name to the object's key for that node. Anything else is an
// error.
func (x *Expression) Key(obj map[string]any) (key string, byNode map[string]string, err error) {
	v, err := x.eval(obj)
	if err != nil {
		return "", nil, err
	}
	switch t := v.(type) {
	case types.String:
		return string(t), nil, nil
	case traits.Mapper:
		byNode = map[string]string{}
		for it := t.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			node, ok1 := k.(types.String)
			val, ok2 := t.Get(k).(types.String)
			if !ok1 || !ok2 {
				return "", nil, fmt.Errorf("gives a map with %s %s: %s, want node names to keys (strings)", k.Type().TypeName(), short(k), short(t.Get(k)))
			}
			byNode[string(node)] = string(val)
		}
		return "", byNode, nil
	}
	return "", nil, fmt.Errorf("gives %s %s, want a string or a map of node names to keys", v.Type().TypeName(), short(v))
}

// Keys runs a usedFrom.sourceKey expression on obj: a key (a string) or
// keys (a list of strings; "" is a key like any other). Anything else is
// an error.
func (x *Expression) Keys(obj map[string]any) ([]string, error) {
	v, err := x.eval(obj)
	if err != nil {
		return nil, err
	}
	switch t := v.(type) {
	case types.String:
		return []string{string(t)}, nil
	case traits.Lister:
		var keys []string
		for it := t.Iterator(); it.HasNext() == types.True; {
			e := it.Next()
			s, ok := e.(types.String)
			if !ok {
				return nil, fmt.Errorf("gives a list with %s %s, want a list of strings", e.Type().TypeName(), short(e))
			}
			keys = append(keys, string(s))
		}
		return keys, nil
	}
	return nil, fmt.Errorf("gives %s %s, want a string or a list of strings", v.Type().TypeName(), short(v))
}

// short renders a value for an error message, cut to a readable length.
func short(v ref.Val) string {
	s := fmt.Sprint(v.Value())
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return fmt.Sprintf("%q", s)
}
