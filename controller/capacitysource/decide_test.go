package capacitysource

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

func TestWant(t *testing.T) {
	obj := func(ref string, capacity int64) Result { return Result{Ref: ref, Node: "n1", Capacity: capacity} }
	broken := Result{Ref: "ciliumnodes.cilium.io/n1", Node: "n1", Err: "capacity expression: negative: -1"}
	// cov is a source without a nodeSelector; sel one with a selector
	// that matches the node or not.
	cov := func(source string, objs ...Result) Coverage {
		return Coverage{Source: source, Resource: "ciliumnodes.cilium.io", Objects: objs}
	}
	sel := func(source string, selected bool, objs ...Result) Coverage {
		return Coverage{Source: source, Resource: "ciliumnodes.cilium.io", Selects: true, Selected: selected, Objects: objs}
	}
	tests := []struct {
		name string
		cov  []Coverage
		want Mirror
	}{
		{name: "no source", want: Mirror{}},
		{name: "a source without a selector and without objects for the node: it awaits one, invalid, not the default",
			cov:  []Coverage{{Source: "cilium", Resource: "ciliumnodes.cilium.io", Draws: "all"}},
			want: Mirror{Value: underlay.InvalidPrefix + "no ciliumnodes.cilium.io object maps to this node", Origin: "cilium", Draws: "all"}},
		{name: "two selector-less sources, no object of either: it awaits both",
			cov:  []Coverage{{Source: "eni", Draws: "marked"}, {Source: "cns", Draws: "all"}, sel("other", false)},
			want: Mirror{Value: underlay.InvalidPrefix + "no object of the capacity sources eni, cns maps to this node", Origin: "eni,cns", Draws: "all"}},
		{name: "a selector-less source awaits nothing on a node a selector takes", cov: []Coverage{cov("cilium"), sel("mine", true, obj("ippools.example.com/n1", 4))},
			want: Mirror{Value: "4", Origin: "mine ippools.example.com/n1"}},
		{name: "a selector-less source awaits nothing on a node another one's object names", cov: []Coverage{cov("eni"), cov("cns", obj("nodenetworkconfigs.acn.azure.com/n1", 6))},
			want: Mirror{Value: "6", Origin: "cns nodenetworkconfigs.acn.azure.com/n1"}},
		{name: "a selector that does not match the node", cov: []Coverage{sel("cilium", false)}, want: Mirror{}},
		{name: "an object for a node the selector leaves out is ignored", cov: []Coverage{sel("cilium", false, obj("ciliumnodes.cilium.io/n1", 12))}, want: Mirror{}},
		{name: "one object", cov: []Coverage{cov("cilium", obj("ciliumnodes.cilium.io/n1", 12))},
			want: Mirror{Value: "12", Origin: "cilium ciliumnodes.cilium.io/n1"}},
		{name: "one object, node selected", cov: []Coverage{sel("cilium", true, obj("ciliumnodes.cilium.io/n1", 0))},
			want: Mirror{Value: "0", Origin: "cilium ciliumnodes.cilium.io/n1"}},
		{name: "selected, no object: invalid, not the default", cov: []Coverage{sel("cilium", true)},
			want: Mirror{Value: underlay.InvalidPrefix + "no ciliumnodes.cilium.io object maps to this node", Origin: "cilium"}},
		{name: "an object without a capacity", cov: []Coverage{sel("cilium", true, broken)},
			want: Mirror{Value: underlay.InvalidPrefix + "capacity expression: negative: -1", Origin: "cilium ciliumnodes.cilium.io/n1"}},
		{name: "two objects map to the node", cov: []Coverage{cov("mine", obj("ippools.example.com/b", 1), obj("ippools.example.com/a", 2))},
			want: Mirror{Value: underlay.InvalidPrefix + "2 objects map to this node: ippools.example.com/a, ippools.example.com/b", Origin: "mine"}},
		{name: "two sources cover the node", cov: []Coverage{sel("cilium", true, obj("ciliumnodes.cilium.io/n1", 3)), cov("mine", obj("ippools.example.com/n1", 4))},
			want: Mirror{Value: underlay.InvalidPrefix + "covered by more than one capacity source: cilium, mine", Origin: "cilium,mine"}},
		{name: "two sources of one resource over disjoint nodes", cov: []Coverage{sel("eni", false, obj("ciliumnodes.cilium.io/n1", 3)), sel("multi-pool", true, obj("ciliumnodes.cilium.io/n1", 30))},
			want: Mirror{Value: "30", Origin: "multi-pool ciliumnodes.cilium.io/n1"}},
		{name: "draws comes from the source", cov: []Coverage{{Source: "cilium", Resource: "ciliumnodes.cilium.io", Draws: "all", Objects: []Result{obj("ciliumnodes.cilium.io/n1", 5)}}},
			want: Mirror{Value: "5", Origin: "cilium ciliumnodes.cilium.io/n1", Draws: "all"}},
		{name: "invalid keeps the source's draws", cov: []Coverage{{Source: "cilium", Resource: "ciliumnodes.cilium.io", Draws: "all", Selects: true, Selected: true}},
			want: Mirror{Value: underlay.InvalidPrefix + "no ciliumnodes.cilium.io object maps to this node", Origin: "cilium", Draws: "all"}},
		{name: "two sources: all if any draws all", cov: []Coverage{{Source: "a", Draws: "marked", Objects: []Result{obj("x/n1", 1)}}, {Source: "b", Draws: "all", Objects: []Result{obj("y/n1", 1)}}},
			want: Mirror{Value: underlay.InvalidPrefix + "covered by more than one capacity source: a, b", Origin: "a,b", Draws: "all"}},
		{name: "the other source does not cover the node", cov: []Coverage{sel("cilium", false), cov("mine", obj("ippools.example.com/n1", 4))},
			want: Mirror{Value: "4", Origin: "mine ippools.example.com/n1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Want(tc.cov)
			if got != tc.want {
				t.Fatalf("Want = %+v, want %+v", got, tc.want)
			}
			// What the one rule reads from it.
			c := underlay.NodeCapacity(map[string]string{names.UnderlayIPSourceCapacityAnnotation: got.Value, names.UnderlayIPSourceAnnotation: got.Origin},
				map[string]string{names.UnderlayIPCapacityLabel: "9"}, 10)
			switch {
			case got == (Mirror{}):
			case got.Invalid() != (c.Invalid != "") || (got.Invalid() && c.IPs != 0):
				t.Errorf("the rule reads %+v from %+v", c, got)
			}
		})
	}
}

func TestPatchFor(t *testing.T) {
	const (
		v = names.UnderlayIPSourceCapacityAnnotation
		o = names.UnderlayIPSourceAnnotation
		d = names.UnderlayIPDrawsAnnotation
	)
	mirror := Mirror{Value: "12", Origin: "cilium ciliumnodes.cilium.io/n1"}
	drawsAll := Mirror{Value: "12", Origin: mirror.Origin, Draws: "all"}
	tests := []struct {
		name        string
		annotations map[string]string
		want        Mirror
		patch       map[string]any // nil: no patch
	}{
		{name: "nothing to write, nothing there", annotations: map[string]string{"other": "x"}, want: Mirror{}},
		{name: "new value", want: mirror, patch: map[string]any{v: "12", o: mirror.Origin}},
		{name: "same value: no patch, however often the object's status changes", annotations: map[string]string{v: "12", o: mirror.Origin}, want: mirror},
		{name: "value changed", annotations: map[string]string{v: "11", o: mirror.Origin}, want: mirror, patch: map[string]any{v: "12", o: mirror.Origin}},
		{name: "origin changed", annotations: map[string]string{v: "12", o: "cilium ciliumnodes.cilium.io/old"}, want: mirror, patch: map[string]any{v: "12", o: mirror.Origin}},
		{name: "origin missing", annotations: map[string]string{v: "12"}, want: mirror, patch: map[string]any{v: "12", o: mirror.Origin}},
		{name: "no longer covered: both removed", annotations: map[string]string{v: "12", o: mirror.Origin, "other": "x"}, want: Mirror{}, patch: map[string]any{v: nil, o: nil}},
		{name: "a stray origin removed", annotations: map[string]string{o: "x"}, want: Mirror{}, patch: map[string]any{o: nil}},
		{name: "draws written", annotations: map[string]string{v: "12", o: mirror.Origin}, want: drawsAll, patch: map[string]any{v: "12", o: mirror.Origin, d: "all"}},
		{name: "draws the same: no patch", annotations: map[string]string{v: "12", o: mirror.Origin, d: "all"}, want: drawsAll},
		{name: "draws changed", annotations: map[string]string{v: "12", o: mirror.Origin, d: "all"}, want: Mirror{Value: "12", Origin: mirror.Origin, Draws: "marked"},
			patch: map[string]any{v: "12", o: mirror.Origin, d: "marked"}},
		{name: "no longer covered: the mark, value and draws removed", annotations: map[string]string{v: "12", o: mirror.Origin, d: "all"}, want: Uncovered,
			patch: map[string]any{v: nil, o: "none", d: nil}},
		{name: "marked uncovered: no patch", annotations: map[string]string{o: "none", "other": "x"}, want: Uncovered},
		{name: "an empty value is still there", annotations: map[string]string{v: ""}, want: Mirror{}, patch: map[string]any{v: nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkPatch(t, PatchFor(tc.annotations, tc.want), tc.patch)
		})
	}
}

// TestMaxCapacityMirrored: the max capacity rides with the capacity, is
// removed when the object no longer says, and an error in it is shown,
// never taken for a number; it changes nothing of the capacity.
func TestMaxCapacityMirrored(t *testing.T) {
	const v, o, m = names.UnderlayIPSourceCapacityAnnotation, names.UnderlayIPSourceAnnotation, names.UnderlayIPSourceMaxCapacityAnnotation
	obj := func(r Result) []Coverage {
		r.Ref = "ciliumnodes.cilium.io/n1"
		return []Coverage{{Source: "cilium", Resource: "ciliumnodes.cilium.io", Objects: []Result{r}}}
	}
	origin := "cilium ciliumnodes.cilium.io/n1"
	tests := []struct {
		name        string
		cov         []Coverage
		want        Mirror
		annotations map[string]string
		patch       map[string]any
	}{
		{name: "known", cov: obj(Result{Node: "n1", Capacity: 12, MaxCapacity: 29, MaxKnown: true}),
			want: Mirror{Value: "12", Origin: origin, Max: "29"}, patch: map[string]any{v: "12", o: origin, m: "29"}},
		{name: "grown: only the max changed", cov: obj(Result{Node: "n1", Capacity: 12, MaxCapacity: 40, MaxKnown: true}),
			annotations: map[string]string{v: "12", o: origin, m: "29"},
			want:        Mirror{Value: "12", Origin: origin, Max: "40"}, patch: map[string]any{v: "12", o: origin, m: "40"}},
		{name: "the object no longer says: removed", cov: obj(Result{Node: "n1", Capacity: 12}),
			annotations: map[string]string{v: "12", o: origin, m: "29"},
			want:        Mirror{Value: "12", Origin: origin}, patch: map[string]any{v: "12", o: origin, m: nil}},
		{name: "an error is shown as invalid, the capacity stands", cov: obj(Result{Node: "n1", Capacity: 12, MaxErr: "maxCapacity expression: no such key"}),
			want:  Mirror{Value: "12", Origin: origin, Max: "invalid: maxCapacity expression: no such key"},
			patch: map[string]any{v: "12", o: origin, m: "invalid: maxCapacity expression: no such key"}},
		{name: "unchanged: no patch", cov: obj(Result{Node: "n1", Capacity: 12, MaxCapacity: 29, MaxKnown: true}),
			annotations: map[string]string{v: "12", o: origin, m: "29"}, want: Mirror{Value: "12", Origin: origin, Max: "29"}},
		{name: "no longer covered: all removed", annotations: map[string]string{v: "12", o: origin, m: "29"},
			want: Mirror{}, patch: map[string]any{v: nil, o: nil, m: nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Want(tc.cov); got != tc.want {
				t.Fatalf("Want = %+v, want %+v", got, tc.want)
			}
			checkPatch(t, PatchFor(tc.annotations, tc.want), tc.patch)
		})
	}
}

func TestSourceOf(t *testing.T) {
	for m, want := range map[Mirror]string{
		{Value: "1", Origin: "cilium ciliumnodes.cilium.io/n1"}: "cilium",
		{Value: "invalid: x", Origin: "cilium"}:                 "cilium",
		{Value: "invalid: x", Origin: "a,b"}:                    "*",
	} {
		if got := sourceOf(m); got != want {
			t.Errorf("sourceOf(%+v) = %q, want %q", m, got, want)
		}
	}
}

// checkPatch fails t unless b is the merge patch of exactly the
// annotations in want (nil: no patch at all).
func checkPatch(t *testing.T, b []byte, want map[string]any) {
	t.Helper()
	if want == nil {
		if b != nil {
			t.Fatalf("patch %s, want none", b)
		}
		return
	}
	var got map[string]map[string]map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got["metadata"]["annotations"], want) {
		t.Fatalf("patch %s, want annotations %v", b, want)
	}
}

// TestMirrorOver: a reader of the objects hands the rule the Node's
// annotations with the mirror's as it read them: set where it has a value,
// gone where it has none, the rest (the override among them) kept, and
// the Node's own map untouched.
func TestMirrorOver(t *testing.T) {
	node := map[string]string{names.UnderlayIPCapacityAnnotation: "7", names.UnderlayIPSourceCapacityAnnotation: "4",
		names.UnderlayIPSourceUsedAnnotation: "3", "keep": "me"}
	got := Mirror{Value: "10", Origin: "cilium ciliumnodes.cilium.io/n1", Draws: "all"}.Over(node)
	want := map[string]string{names.UnderlayIPCapacityAnnotation: "7", names.UnderlayIPSourceCapacityAnnotation: "10",
		names.UnderlayIPSourceAnnotation: "cilium ciliumnodes.cilium.io/n1", names.UnderlayIPDrawsAnnotation: "all", "keep": "me"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Over = %v, want %v", got, want)
	}
	if node[names.UnderlayIPSourceCapacityAnnotation] != "4" || node[names.UnderlayIPSourceUsedAnnotation] != "3" {
		t.Errorf("the Node's own annotations changed: %v", node)
	}
	if got := (Mirror{}).Over(node); len(got) != 2 || got["keep"] != "me" || got[names.UnderlayIPCapacityAnnotation] != "7" {
		t.Errorf("the zero Mirror over the Node: %v, want only what is not the mirror's", got)
	}
}
