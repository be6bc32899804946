package capacitysource

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// object decodes YAML the way the dynamic client decodes JSON: whole
// numbers are int64, others float64.
func object(t testing.TB, y string) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return fromJSON(t, j)
}

func fromJSON(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := utiljson.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCompileRefuses: an expression that cannot run is refused when the
// file is loaded, with CEL's own words.
func TestCompileRefuses(t *testing.T) {
	tests := []struct {
		name, expr string
		want       *cel.Type
		err        string
	}{
		{name: "empty", expr: "  ", want: cel.IntType, err: "empty expression"},
		{name: "syntax", expr: "size(object.spec.pool", want: cel.IntType, err: "Syntax error"},
		{name: "undeclared variable", expr: "size(objet.spec)", want: cel.IntType, err: "undeclared reference to 'objet'"},
		{name: "unknown function", expr: "count(object.spec)", want: cel.IntType, err: "undeclared reference to 'count'"},
		{name: "a string where a count is due", expr: `"ten"`, want: cel.IntType, err: "gives string, want int"},
		{name: "a bool where a count is due", expr: `has(object.spec)`, want: cel.IntType, err: "gives bool, want int"},
		{name: "a double where a count is due", expr: `1.5`, want: cel.IntType, err: "gives double, want int"},
		{name: "an int where a node name is due", expr: `1`, want: cel.StringType, err: "gives int, want string"},
		{name: "bad regex literal", expr: `object.metadata.name.matches("(") ? 1 : 0`, want: cel.IntType, err: "invalid matches argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compile(tc.expr, tc.want, CostLimit)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("compile(%q) = %v, want an error containing %q", tc.expr, err, tc.err)
			}
		})
	}
}

// TestCount: what a capacity expression may give. Only a whole number
// from 0 to 1048576 is a count; everything else is an error naming what
// it gave, which makes the node invalid.
func TestCount(t *testing.T) {
	obj := object(t, `
metadata: {name: n1}
spec:
  ips: [a, b, c]
  count: 7
  big: 1048577
  negative: -2
  half: 2.5
  whole: 3.0
  text: "10"
  pool: {10.0.0.1: {}, 10.0.0.2: {}}
`)
	tests := []struct {
		name, expr string
		want       int64
		err        string
	}{
		{name: "size of a list", expr: "size(object.spec.ips)", want: 3},
		{name: "size of a map", expr: "size(object.spec.pool)", want: 2},
		{name: "an int field", expr: "object.spec.count", want: 7},
		{name: "arithmetic", expr: "object.spec.count - size(object.spec.ips)", want: 4},
		{name: "zero", expr: "0", want: 0},
		{name: "uint", expr: "3u", want: 3},
		{name: "absent field with a default", expr: "object.?spec.?nothing.orValue(5)", want: 5},
		{name: "largest", expr: "1048576", want: 1 << 20},

		{name: "absent field", expr: "object.spec.nothing", err: "no such key: nothing"},
		{name: "negative", expr: "object.spec.negative", err: "negative: -2"},
		{name: "negative arithmetic", expr: "size(object.spec.ips) - object.spec.count", err: "negative: -4"},
		{name: "too large", expr: "object.spec.big", err: "larger than 1048576: 1048577"},
		{name: "too large uint", expr: "18446744073709551615u", err: "larger than 1048576"},
		{name: "fraction", expr: "object.spec.half", err: "not an integer: 2.5"},
		{name: "a double literal is not a count", expr: "dyn(2.0)", err: "not an integer: 2"},
		{name: "a string that reads as a number", expr: "object.spec.text", err: `gives string "10", want an int`},
		{name: "a list", expr: "object.spec.ips", err: "gives list"},
		{name: "overflow", expr: "9223372036854775807 + object.spec.count", err: "overflow"},
		{name: "division by zero", expr: "object.spec.count / (size(object.spec.ips) - 3)", err: "division by zero"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := compile(tc.expr, cel.IntType, CostLimit)
			if err != nil {
				t.Fatal(err)
			}
			got, err := x.Count(obj)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Count(%q) = %d, %v; want an error containing %q", tc.expr, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Count(%q) = %d, %v; want %d", tc.expr, got, err, tc.want)
			}
		})
	}
}

// TestCostLimit: an expression that walks an object past the cost limit
// fails at run time (and so makes its node invalid) instead of burning
// the controller's CPU; the same expression on a small object runs.
func TestCostLimit(t *testing.T) {
	const expr = "object.items.map(a, object.items.map(b, a * b).sum()).sum()"
	x, err := compile(expr, cel.IntType, CostLimit)
	if err != nil {
		t.Fatal(err)
	}
	items := func(n int) map[string]any {
		l := make([]any, n)
		for i := range l {
			l[i] = int64(1)
		}
		return map[string]any{"items": l}
	}
	if got, err := x.Count(items(10)); err != nil || got != 100 {
		t.Fatalf("10 items: %d, %v; want 100", got, err)
	}
	if got, err := x.Count(items(2000)); err == nil || !strings.Contains(err.Error(), "cost limit exceeded") {
		t.Fatalf("2000 items (4 million steps): %d, %v; want the cost limit exceeded", got, err)
	}
}

func TestNodeNames(t *testing.T) {
	obj := object(t, `{metadata: {name: n1, labels: {node: n2}}, spec: {num: 3},
  status: {allocations: [{nodeName: n2, sliceRange: a}, {nodeName: "", sliceRange: b}, {nodeName: n1, sliceRange: c}, {nodeName: n2, sliceRange: d}]}}`)
	for _, tc := range []struct {
		expr, err string
		want      []string
		list      bool
	}{
		{expr: "object.metadata.name", want: []string{"n1"}},
		{expr: "object.metadata.labels.node", want: []string{"n2"}},
		{expr: `object.?spec.?nodeName.orValue("")`},
		{expr: "object.spec.num", err: "gives int"},
		{expr: "object.spec.nodeName", err: "no such key"},
		{expr: "object.status.allocations.map(a, a.nodeName)", want: []string{"n1", "n2"}, list: true},
		{expr: "object.status.allocations.filter(a, a.sliceRange == 'x').map(a, a.nodeName)", list: true},
		{expr: "object.status.allocations.map(a, size(a.nodeName))", err: "a list with int"},
	} {
		x, err := compile(tc.expr, cel.StringType, CostLimit)
		if err != nil {
			t.Fatal(err)
		}
		got, list, err := x.NodeNames(obj)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("NodeNames(%q) = %q, %v; want an error containing %q", tc.expr, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) || list != tc.list {
			t.Errorf("NodeNames(%q) = %q (list %v), %v; want %q (list %v)", tc.expr, got, list, err, tc.want, tc.list)
		}
	}
	if _, err := compile("object.spec.num + 1", cel.StringType, CostLimit); err == nil {
		t.Error("a node expression giving an int compiled")
	}
}

func BenchmarkEvaluatePreset(b *testing.B) {
	s, _ := Source{Name: "cilium", Preset: "cilium-eni"}.Expand()
	c, err := s.compile(CostLimit)
	if err != nil {
		b.Fatal(err)
	}
	obj := ciliumENI(b, 40, 30)
	b.ReportAllocs()
	for b.Loop() {
		if r := Evaluate(c, "", "n1", obj); r.Err != "" {
			b.Fatal(r.Err)
		}
	}
}
