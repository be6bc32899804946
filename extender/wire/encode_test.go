package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// awkwardStrings need escaping, or look as if they might.
var awkwardStrings = []string{"", "node-a", `q"uote`, `back\slash`, "tab\tnl\n", "\x00\x1f", "<b>&amp;</b>", "é日本",
	"\u2028\u2029", "\xff\xfe bad utf-8", "a\xc3", "/slash", "\x7f"}

// checkFilterResult fails unless WriteTo and json.Marshal give the same
// document once decoded the way kube-scheduler decodes it.
func checkFilterResult(t *testing.T, res *FilterResult) {
	t.Helper()
	var buf bytes.Buffer
	n, err := res.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo = %d, %v; wrote %d", n, err, buf.Len())
	}
	if !json.Valid(buf.Bytes()) {
		t.Fatalf("invalid JSON: %q", buf.Bytes())
	}
	want, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got, exp extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &exp); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("WriteTo decodes to %+v, json.Marshal to %+v", got, exp)
	}
}

// checkHostPriorities fails unless writeHostPriorities writes exactly what
// json.Encoder writes.
func checkHostPriorities(t *testing.T, list extenderv1.HostPriorityList) {
	t.Helper()
	var got, want bytes.Buffer
	n, err := writeHostPriorities(&got, list)
	if err != nil || n != int64(got.Len()) {
		t.Fatalf("writeHostPriorities = %d, %v; wrote %d", n, err, got.Len())
	}
	if err := json.NewEncoder(&want).Encode(list); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("writeHostPriorities wrote\n%q\njson.Encoder\n%q", got.Bytes(), want.Bytes())
	}
}

func TestFilterResultWriteToStrings(t *testing.T) {
	names := append([]string(nil), awkwardStrings...)
	failed := extenderv1.FailedNodesMap{}
	for i, s := range awkwardStrings {
		failed[s] = awkwardStrings[len(awkwardStrings)-1-i]
	}
	var nilNames []string
	tests := []struct {
		name string
		res  *FilterResult
	}{
		{name: "awkward strings", res: &FilterResult{NodeNames: &names, FailedNodes: failed, FailedAndUnresolvableNodes: failed, Error: strings.Join(awkwardStrings, "|")}},
		{name: "nil names", res: &FilterResult{NodeNames: &nilNames}},
		{name: "empty names", res: &FilterResult{NodeNames: &[]string{}, FailedNodes: extenderv1.FailedNodesMap{}}},
		{name: "zero", res: &FilterResult{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkFilterResult(t, tc.res) })
	}
}

func TestWriteHostPriorities(t *testing.T) {
	tests := []struct {
		name string
		list extenderv1.HostPriorityList
	}{
		{name: "nil"},
		{name: "empty", list: extenderv1.HostPriorityList{}},
		{name: "scores", list: extenderv1.HostPriorityList{{Host: "a", Score: 10}, {Host: "b"}, {Host: "c", Score: -3}, {Host: "d", Score: 1 << 62}}},
	}
	for _, s := range awkwardStrings {
		tests = append(tests, struct {
			name string
			list extenderv1.HostPriorityList
		}{name: "host " + s, list: extenderv1.HostPriorityList{{Host: s, Score: 5}}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkHostPriorities(t, tc.list) })
	}
}

func FuzzWriteResults(f *testing.F) {
	for i, s := range awkwardStrings {
		f.Add(s, awkwardStrings[(i+1)%len(awkwardStrings)], int64(i))
	}
	f.Add("a", strings.Repeat("long reason ", 4000), int64(1))
	f.Fuzz(func(t *testing.T, a, b string, score int64) {
		checkHostPriorities(t, extenderv1.HostPriorityList{{Host: a, Score: score}, {Host: b}})
		names := []string{a, b}
		checkFilterResult(t, &FilterResult{NodeNames: &names, FailedNodes: extenderv1.FailedNodesMap{a: b, b: a},
			FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{b: a}, Error: a + b})
		// The handler's form: rejected nodes as a list, names marked
		// plain when they are.
		listed := &FilterResult{NodeNames: &names, FailedNodes: extenderv1.FailedNodesMap{}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{},
			plainNames: allPlain(names),
			failed:     []failedNode{{name: a, reason: b}, {name: b, reason: b}, {name: a + "x", reason: a, unresolvable: true}, {name: b + "y", reason: a, unresolvable: true}}}
		mapped := &FilterResult{NodeNames: &names, FailedNodes: extenderv1.FailedNodesMap{a: b, b: b},
			FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{a + "x": a, b + "y": a}}
		if a == b {
			return // the same node named twice: last wins in both forms only when reasons agree
		}
		var got, want bytes.Buffer
		if _, err := listed.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		if _, err := mapped.WriteTo(&want); err != nil {
			t.Fatal(err)
		}
		var g, w extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(got.Bytes(), &g); err != nil {
			t.Fatalf("%v: %q", err, got.Bytes())
		}
		if err := json.Unmarshal(want.Bytes(), &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("listed form decodes to %+v, mapped form to %+v", g, w)
		}
	})
}

// TestHandlerFilterResultMatchesFilter checks that what the handler writes
// (rejected nodes as a list) decodes to what Filter returns (as maps).
func TestHandlerFilterResultMatchesFilter(t *testing.T) {
	l := fuzzLedger()
	for _, args := range []*Args{
		namesArgs(pod("p", "", 1), "a", "b", "c", "ghost", "a", "b"),
		namesArgs(pod("p", "", 4), "a", "b", "c"),
		namesArgs(pod("p", "", 0), "a", "b"),
		namesArgs(pod("p", "", 1)),
		nodesArgs(pod("p", "", 2), node("a", ""), node("late", "4"), node("bad", "-1"), node("c", "")),
	} {
		var buf bytes.Buffer
		if _, err := verbsOf(l).filter(args, new(Scratch)).WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		var got, want extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("%v: %s", err, buf.Bytes())
		}
		if err := json.Unmarshal(mustJSON(t, oracleFilter(l, args)), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("handler writes %+v, Filter gives %+v", got, want)
		}
	}
}

// TestHandlerPrioritizeMatchesPrioritize checks that what the handler writes
// is byte for byte json.Encoder's encoding of Prioritize.
func TestHandlerPrioritizeMatchesPrioritize(t *testing.T) {
	l := fuzzLedger()
	for _, args := range []*Args{
		namesArgs(pod("p", "", 1), "a", "b", "c", "ghost", "a"),
		namesArgs(pod("p", "", 0), "a", "<b>"),
		{Pod: pod("p", "", 1), NodeNames: &[]string{}},
		nodesArgs(pod("p", "", 2), node("a", ""), node("late", "4"), node("bad", "-1"), node("c&d", "")),
	} {
		data := mustJSON(t, args)
		decoded, err := DecodeExtenderArgs(data)
		if err != nil {
			t.Fatal(err)
		}
		names, scores := verbsOf(l).prioritize(decoded, new(Scratch))
		var got, want bytes.Buffer
		at := func(i int) (string, int64) { return names[i], scores[i] }
		if _, err := writeScores(&got, nil, len(names), at, decoded.NodeNames != nil && decoded.plainNames); err != nil {
			t.Fatal(err)
		}
		if err := json.NewEncoder(&want).Encode(oraclePrioritize(l, decoded)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("handler writes %q, want %q", got.Bytes(), want.Bytes())
		}
	}
}

// writeHostPriorities writes list as json.Encoder would (newline included).
func writeHostPriorities(w io.Writer, list extenderv1.HostPriorityList) (int64, error) {
	if list == nil {
		n, err := io.WriteString(w, "null\n")
		return int64(n), err
	}
	return writeScores(w, nil, len(list), func(i int) (string, int64) { return list[i].Host, list[i].Score }, false)
}
