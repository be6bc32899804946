package capacitysource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name, file string
		err        string // "" when valid
	}{
		{name: "a preset", file: "sources: [{name: cilium, preset: cilium-eni}]"},
		{name: "a source of one's own", file: `
sources:
- name: mine
  resource: {group: ipam.example.com, version: v1, resource: nodepools}
  node: object.spec.nodeName
  capacity: object.status.free + object.status.used
  nodeSelector: {matchLabels: {pool: underlay}}
  draws: marked`},
		{name: "a preset's draws overridden", file: "sources: [{name: underlay, preset: cilium-multi-pool, draws: marked}]"},
		{name: "a source of one's own must say which pods draw", file: "sources: [{name: a, resource: {group: g.io, version: v1, resource: r}, node: x, capacity: y}]",
			err: "sources[0].draws: Required value: which pods take an IP from this pool: all"},
		{name: "draws misspelt", file: "sources: [{name: a, preset: cilium-eni, draws: every}]", err: `sources[0].draws: Unsupported value: "every": supported values: "all", "marked"`},
		{name: "the name none is the mirror's mark", file: "sources: [{name: none, preset: cilium-eni}]", err: `sources[0].name: Invalid value: "none": reserved`},
		{name: "every preset", file: "sources: [{name: a, preset: cilium-eni}, {name: b, preset: cilium-azure}, {name: c, preset: cilium-multi-pool}, {name: d, preset: azure-cns}]"},
		{name: "no sources: the mirror removes what it wrote", file: "sources: []"},

		{name: "unknown field", file: "sources: [{name: a, preset: cilium-eni, capcity: x}]", err: `unknown field "capcity"`},
		{name: "unknown preset", file: "sources: [{name: a, preset: calico}]", err: `sources[0].preset: Unsupported value: "calico"`},
		{name: "no name", file: "sources: [{preset: cilium-eni}]", err: "sources[0].name: Required value"},
		{name: "bad name", file: "sources: [{name: Cilium_1, preset: cilium-eni}]", err: "sources[0].name: Invalid value"},
		{name: "duplicate name", file: "sources: [{name: a, preset: cilium-eni}, {name: a, preset: azure-cns}]", err: `sources[1].name: Duplicate value: "a"`},
		{name: "no resource", file: "sources: [{name: a, node: x, capacity: y}]", err: "sources[0].resource: Required value"},
		{name: "no version", file: "sources: [{name: a, resource: {group: g.io, resource: r}, node: x, capacity: y}]", err: "sources[0].resource.version: Required value"},
		{name: "no plural", file: "sources: [{name: a, resource: {group: g.io, version: v1}, node: x, capacity: y}]", err: "sources[0].resource.resource: Required value"},
		{name: "no expressions", file: "sources: [{name: a, resource: {group: g.io, version: v1, resource: r}}]", err: "sources[0].node: Required value"},
		{name: "bad selector", file: "sources: [{name: a, preset: cilium-eni, nodeSelector: {matchExpressions: [{key: k, operator: Sometimes}]}}]", err: "sources[0].nodeSelector"},
		{name: "bad namespace", file: "sources: [{name: a, preset: azure-cns, namespace: Kube_System}]", err: "sources[0].namespace"},
		{name: "not YAML", file: "sources: [", err: "decoding capacity sources"},
		{name: "a maxCapacity of one's own", file: "sources: [{name: a, preset: cilium-eni, maxCapacity: '110'}]"},
		{name: "an optional maxCapacity", file: "sources: [{name: a, preset: cilium-eni, maxCapacity: 'optional.none()'}]"},
		{name: "a maxCapacity that does not compile", file: "sources: [{name: a, preset: cilium-eni, maxCapacity: 'objet.x'}]",
			err: "sources[0] (a): maxCapacity: ERROR"},
		{name: "a maxCapacity that gives a string", file: `sources: [{name: a, preset: cilium-eni, maxCapacity: '"10"'}]`,
			err: "sources[0] (a): maxCapacity: gives string, want optional_type(int)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Decode([]byte(tc.file))
			if err == nil && tc.err != "" {
				_, err = f.Compile()
			}
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.Compile(); err != nil {
					t.Fatalf("Compile: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Decode = %v, want an error containing %q", err, tc.err)
			}
		})
	}
	if _, err := Decode(make([]byte, MaxFileSize+1)); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("an oversized file: %v", err)
	}
}

// TestCompileNamesTheSource: an expression that does not compile stops
// capscale-controller at start with the source's index, name and field.
func TestCompileNamesTheSource(t *testing.T) {
	f, err := Decode([]byte(`
sources:
- name: fine
  preset: cilium-eni
- name: typo
  resource: {group: ipam.example.com, version: v1, resource: nodepools}
  node: object.metadata.name
  capacity: size(objet.status.free)
  draws: all`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Compile()
	if err == nil || !strings.Contains(err.Error(), "sources[1] (typo): capacity:") || !strings.Contains(err.Error(), "undeclared reference to 'objet'") {
		t.Fatalf("Compile = %v, want an error naming sources[1] (typo), its capacity and CEL's reason", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "sources.yaml")
	if err := os.WriteFile(path, []byte("sources: [{name: mine, preset: cilium-eni, node: '1'}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path+": sources[0] (mine): node: gives int, want string") {
		t.Fatalf("Load = %v, want the file, the source and the node expression named", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

func TestExpand(t *testing.T) {
	s, err := Source{Name: "a", Preset: "azure-cns", Namespace: "cns"}.Expand()
	if err != nil || s.Namespace != "cns" || s.Resource.Resource != "nodenetworkconfigs" || s.Capacity != Presets["azure-cns"].Capacity {
		t.Errorf("azure-cns in namespace cns: %+v, %v", s, err)
	}
	s, err = Source{Name: "a", Preset: "azure-cns"}.Expand()
	if err != nil || s.Namespace != "kube-system" {
		t.Errorf("azure-cns: namespace %q, %v; want kube-system", s.Namespace, err)
	}
	// A resource of one's own drops the preset's namespace with it.
	s, err = Source{Name: "a", Preset: "azure-cns", Resource: &Resource{Version: "v1", Resource: "things"}}.Expand()
	if err != nil || s.Namespace != "" {
		t.Errorf("own resource: namespace %q, %v; want none", s.Namespace, err)
	}
	// maxCapacity is the preset's unless the source writes its own.
	if s, _ := (Source{Name: "a", Preset: "azure-cns"}).Expand(); s.MaxCapacity != Presets["azure-cns"].MaxCapacity || s.MaxCapacity == "" {
		t.Errorf("azure-cns: maxCapacity %q, want the preset's", s.MaxCapacity)
	}
	if s, _ := (Source{Name: "a", Preset: "azure-cns", MaxCapacity: "64"}).Expand(); s.MaxCapacity != "64" {
		t.Errorf("own maxCapacity: %q, want 64", s.MaxCapacity)
	}
	// Expand never changes the preset itself.
	s.Resource.Resource = "changed"
	if Presets["azure-cns"].Resource.Resource != "nodenetworkconfigs" {
		t.Error("Expand shares the preset's Resource")
	}
}

// FuzzDecode: the file is outside input. Decode never panics, and what it
// accepts re-encodes to a file it accepts alike.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"sources: [{name: cilium, preset: cilium-eni}]",
		"sources: [{name: a, resource: {group: g.io, version: v1, resource: r}, node: object.metadata.name, capacity: '1', nodeSelector: {matchLabels: {a: b}}, draws: all}]",
		"sources: []", "", "{}", "sources: [{name: a, preset: calico}]", "sources: [{name: x, namespace: y, preset: azure-cns}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Decode(data)
		if err != nil {
			return
		}
		again, err := yaml.Marshal(file)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", file, err)
		}
		file2, err := Decode(again)
		if err != nil {
			t.Fatalf("Decode accepted %q but not its re-encoding %q: %v", data, again, err)
		}
		if len(file2.Sources) != len(file.Sources) {
			t.Fatalf("re-encoding changed the sources: %d then %d", len(file.Sources), len(file2.Sources))
		}
	})
}
