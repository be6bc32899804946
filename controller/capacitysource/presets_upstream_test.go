package capacitysource

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPresetsOnCiliumWritten: each Cilium preset on CiliumNodes written by
// Cilium v1.20.2's own code (cilium-operator's ENI IPAM against Cilium's
// mock EC2 API, the agent's pod IPs out of Cilium's IP allocator) counts
// exactly what that allocator could still give pods. The files come from
// `cd ciliumcheck && go test ./... -update` (its own module, run by make
// test-unit), which runs this test on freshly written objects too
// (CAPSCALE_CILIUM_FIXTURES names their directory).
func TestPresetsOnCiliumWritten(t *testing.T) {
	dir, want := filepath.Join("testdata", "ciliumnodes"), 8
	if d := os.Getenv("CAPSCALE_CILIUM_FIXTURES"); d != "" {
		dir, want = d, 1
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) < want {
		t.Fatalf("%d fixtures in %s (%v), want %d: the ciliumcheck module's (cd ciliumcheck && go test ./... -update)", len(files), dir, err, want)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			fx := fromJSON(t, b)
			obj, ok := fx["object"].(map[string]any)
			if !ok {
				t.Fatalf("%s: no object", f)
			}
			r := Evaluate(presetSource(t, fx["preset"].(string)), "", "n", obj)
			// A fixture may say the object hides some of what the agent
			// holds: then the preset is exactly that much under, never over.
			under, _ := fx["under"].(int64)
			want := fx["allocatable"].(int64) - under
			t.Logf("ROW | %s | %s | %d | %d | %d |", fx["preset"], fx["objects"], r.Capacity, fx["allocatable"], r.Capacity-fx["allocatable"].(int64))
			if r.Err != "" || r.Capacity != want {
				t.Fatalf("%s on %s: %+v, want capacity %d (what Cilium's allocator can give pods, %d, less %d: %v)", fx["preset"], fx["objects"], r, want, fx["allocatable"], under, fx["underWhy"])
			}
		})
	}
}
