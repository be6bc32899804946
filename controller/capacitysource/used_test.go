package capacitysource

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// usedSource is a source of one's own whose objects report the IPs in use.
const usedSource = `
sources:
- name: mine
  resource: {group: ipam.example.com, version: v1, resource: nodepools}
  node: object.spec.nodeName
  capacity: object.spec.size
  draws: marked
  used: object.status.inUse
`

// TestUsedCompiles: used is optional, compiled like capacity, and a bad one
// is an error at start naming the source and the field.
func TestUsedCompiles(t *testing.T) {
	f, err := Decode([]byte(usedSource))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].Used == nil {
		t.Fatal("used not compiled")
	}
	f, err = Decode([]byte("sources: [{name: a, preset: cilium-eni}]"))
	if err != nil {
		t.Fatal(err)
	}
	if cs, err = f.Compile(); err != nil || cs[0].Used != nil {
		t.Fatalf("a source without used: %v, used %v", err, cs[0].Used)
	}
	f, err = Decode([]byte(strings.Replace(usedSource, "object.status.inUse", "object.status.inUse + 'x'", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err = f.Compile(); err == nil || !strings.Contains(err.Error(), "sources[0] (mine): used:") {
		t.Fatalf("Compile = %v, want an error naming sources[0] (mine): used", err)
	}
}

// TestUsedMirrored: an object's used count goes onto its node beside the
// capacity, and the rule reads it; a failing used expression is mirrored
// invalid, and the rule makes the node invalid.
func TestUsedMirrored(t *testing.T) {
	f, err := Decode([]byte(usedSource))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	obj := func(status map[string]any) map[string]any {
		return map[string]any{"spec": map[string]any{"nodeName": "n1", "size": int64(10)}, "status": status}
	}
	tests := []struct {
		name       string
		obj        map[string]any
		wantUsed   string
		wantReport underlay.IPAMReport
		invalid    bool
	}{
		{name: "reported", obj: obj(map[string]any{"inUse": int64(10)}), wantUsed: "10", wantReport: underlay.IPAMReport{Used: 10, Reported: true}},
		{name: "released", obj: obj(map[string]any{"inUse": int64(9)}), wantUsed: "9", wantReport: underlay.IPAMReport{Used: 9, Reported: true}},
		{name: "missing field", obj: obj(map[string]any{}), wantUsed: underlay.InvalidPrefix + "used expression:", invalid: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate(cs[0], "", "n1", tc.obj)
			m := Want([]Coverage{{Source: "mine", Resource: cs[0].Resource.String(), Objects: []Result{r}}})
			if !strings.HasPrefix(m.Used, tc.wantUsed) || m.Value != "10" {
				t.Fatalf("Want = %+v, want capacity 10 and used %q", m, tc.wantUsed)
			}
			var patch map[string]map[string]map[string]any
			if err := json.Unmarshal(PatchFor(nil, m), &patch); err != nil {
				t.Fatal(err)
			}
			annotations := map[string]string{}
			for k, v := range patch["metadata"]["annotations"] {
				annotations[k] = v.(string)
			}
			c := underlay.NodeCapacity(annotations, nil, 3)
			if tc.invalid {
				if c.Invalid == "" || c.IPs != 0 {
					t.Fatalf("the rule reads %+v, want invalid", c)
				}
				return
			}
			if c.IPs != 10 || c.IPAM != tc.wantReport {
				t.Fatalf("the rule reads %+v, want 10 and %+v", c, tc.wantReport)
			}
		})
	}
}

// TestPatchForUsed: the used annotation is written, changed and removed
// with the mirror, and a change of used alone is a patch (the IPAM gave an
// IP back).
func TestPatchForUsed(t *testing.T) {
	const (
		v = names.UnderlayIPSourceCapacityAnnotation
		o = names.UnderlayIPSourceAnnotation
		u = names.UnderlayIPSourceUsedAnnotation
	)
	m := Mirror{Value: "10", Origin: "mine nodepools.ipam.example.com/n1", Used: "9"}
	tests := []struct {
		name        string
		annotations map[string]string
		want        Mirror
		patch       map[string]any
	}{
		{name: "new", want: m, patch: map[string]any{v: "10", o: m.Origin, u: "9"}},
		{name: "same", annotations: map[string]string{v: "10", o: m.Origin, u: "9"}, want: m},
		{name: "the IPAM released an IP", annotations: map[string]string{v: "10", o: m.Origin, u: "10"}, want: m, patch: map[string]any{v: "10", o: m.Origin, u: "9"}},
		{name: "source lost its used", annotations: map[string]string{v: "10", o: m.Origin, u: "9"}, want: Mirror{Value: "10", Origin: m.Origin},
			patch: map[string]any{v: "10", o: m.Origin, u: nil}},
		{name: "no longer covered", annotations: map[string]string{v: "10", o: m.Origin, u: "9"}, want: Mirror{}, patch: map[string]any{v: nil, o: nil, u: nil}},
		// The minimal patch: only the annotation the node carries is removed.
		{name: "a stray used removed", annotations: map[string]string{u: "3"}, want: Mirror{}, patch: map[string]any{u: nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkPatch(t, PatchFor(tc.annotations, tc.want), tc.patch)
		})
	}
}
