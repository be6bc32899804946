package devices

import (
	"fmt"
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name      string
		budget    int64
		allocated []string
		want      []string
	}{
		{name: "empty node", budget: 3, want: []string{"ip-0", "ip-1", "ip-2"}},
		{name: "no budget", budget: 0, want: []string{}},
		{name: "allocated inside the budget keep the same names", budget: 3, allocated: []string{"ip-2", "ip-0"}, want: []string{"ip-0", "ip-1", "ip-2"}},
		// A shrink from 10 to 3 under two claims on ip-7 and ip-9: they stay
		// published, one more is free, never three.
		{name: "shrink under allocated claims", budget: 3, allocated: []string{"ip-7", "ip-9"}, want: []string{"ip-0", "ip-7", "ip-9"}},
		// Over the budget, nothing is published: a claim that ends must not
		// free a device while the node is still over.
		{name: "shrink below what is allocated publishes nothing", budget: 1, allocated: []string{"ip-7", "ip-9"}, want: []string{}},
		{name: "invalid budget (0) under claims", budget: 0, allocated: []string{"ip-1"}, want: []string{}},
		{name: "at the budget exactly, the allocated stay", budget: 2, allocated: []string{"ip-7", "ip-9"}, want: []string{"ip-7", "ip-9"}},
		{name: "negative budget", budget: -4, want: []string{}},
		{name: "a name not ours is ignored", budget: 2, allocated: []string{"gpu-0", "ip-01", "ip--1"}, want: []string{"ip-0", "ip-1"}},
		{name: "a device allocated twice counts once", budget: 2, allocated: []string{"ip-1", "ip-1"}, want: []string{"ip-0", "ip-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Names(tc.budget, tc.allocated)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Names(%d, %v) = %v, want %v", tc.budget, tc.allocated, got, tc.want)
			}
			free := len(got)
			for _, d := range got {
				if slices.Contains(tc.allocated, d) {
					free--
				}
			}
			// However many of the published allocated devices end before
			// the next sync, what is free never passes what the budget
			// leaves: so over the budget none may be published.
			published := len(got) - free
			ours := map[string]bool{}
			for _, a := range tc.allocated {
				if deviceIndex(a) >= 0 {
					ours[a] = true
				}
			}
			if held := int64(len(ours)); int64(free) > max(tc.budget-held, 0) || (held > tc.budget && published > 0) {
				t.Errorf("%d free and %d allocated devices published on a budget of %d with %d allocated", free, published, tc.budget, held)
			}
		})
	}
}

func TestNamesBounded(t *testing.T) {
	if got := len(Names(1<<20, nil)); got != MaxDevices {
		t.Errorf("a budget of 2^20 publishes %d devices, want MaxDevices (%d)", got, MaxDevices)
	}
}

func TestSlices(t *testing.T) {
	for _, tc := range []struct {
		devices, wantSlices int
	}{{0, 1}, {1, 1}, {MaxPerSlice, 1}, {MaxPerSlice + 1, 2}, {MaxDevices, 8}} {
		t.Run(fmt.Sprint(tc.devices), func(t *testing.T) {
			got := Slices("n1", "uid-1", 4, Names(int64(tc.devices), nil), false)
			if len(got) != tc.wantSlices {
				t.Fatalf("%d devices in %d slices, want %d", tc.devices, len(got), tc.wantSlices)
			}
			total := 0
			for k, s := range got {
				total += len(s.Spec.Devices)
				if len(s.Spec.Devices) > MaxPerSlice {
					t.Errorf("slice %d holds %d devices", k, len(s.Spec.Devices))
				}
				if s.Spec.Driver != Driver || *s.Spec.NodeName != "n1" || s.Spec.Pool.Name != "n1" ||
					s.Spec.Pool.Generation != 4 || s.Spec.Pool.ResourceSliceCount != int64(tc.wantSlices) {
					t.Errorf("slice %d: %+v", k, s.Spec)
				}
				if o := s.OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].UID != "uid-1" {
					t.Errorf("slice %d owners: %+v", k, o)
				}
			}
			if total != tc.devices {
				t.Errorf("%d devices published, want %d", total, tc.devices)
			}
		})
	}
}

func TestChanges(t *testing.T) {
	const node, uid = "n1", types.UID("u1")
	cur := Slices(node, uid, 3, Names(10, nil), false)
	cur[0].ResourceVersion = "77"
	if got := Changes(node, uid, cur, Names(10, []string{"ip-4"}), false); got != nil {
		t.Errorf("an allocation inside the budget writes: %+v", got)
	}
	t.Run("budget moves: one update at the next generation", func(t *testing.T) {
		got := Changes(node, uid, cur, Names(4, nil), false)
		if len(got) != 1 || got[0].Update == nil {
			t.Fatalf("changes: %+v", got)
		}
		u := got[0].Update
		if u.ResourceVersion != "77" || u.Spec.Pool.Generation != 4 || len(u.Spec.Devices) != 4 {
			t.Errorf("update: rv %s gen %d devices %d", u.ResourceVersion, u.Spec.Pool.Generation, len(u.Spec.Devices))
		}
	})
	t.Run("first publish creates", func(t *testing.T) {
		got := Changes(node, uid, nil, Names(2, nil), false)
		if len(got) != 1 || got[0].Create == nil || got[0].Create.Spec.Pool.Generation != 1 {
			t.Fatalf("changes: %+v", got)
		}
	})
	t.Run("a pool that grows past a slice and shrinks back", func(t *testing.T) {
		grown := Changes(node, uid, cur, Names(MaxPerSlice+1, nil), false)
		if len(grown) != 2 || grown[0].Update == nil || grown[1].Create == nil {
			t.Fatalf("grow: %+v", grown)
		}
		two := []*resourcev1.ResourceSlice{grown[0].Update, grown[1].Create}
		shrunk := Changes(node, uid, two, Names(3, nil), false)
		if len(shrunk) != 2 || shrunk[0].Update == nil || shrunk[1].Delete == nil || shrunk[1].Delete.Name != SliceName(node, 1) {
			t.Fatalf("shrink: %+v", shrunk)
		}
		if g := shrunk[0].Update.Spec.Pool; g.Generation != 5 || g.ResourceSliceCount != 1 {
			t.Errorf("pool after the shrink: %+v", g)
		}
	})
	t.Run("a node that declares DRAOptionalNodeOperations: its slices skip node operations", func(t *testing.T) {
		got := Changes(node, uid, cur, Names(10, nil), true)
		if len(got) != 1 || got[0].Update == nil || !slices.Equal(got[0].Update.Spec.SkipNodeOperations, []resourcev1.SkipNodeOperation{"*"}) {
			t.Fatalf("changes: %+v", got)
		}
	})
	t.Run("a node re-created with another UID gets its owner again", func(t *testing.T) {
		got := Changes(node, "u2", cur, Names(10, nil), false)
		if len(got) != 1 || got[0].Update == nil || got[0].Update.OwnerReferences[0].UID != "u2" {
			t.Fatalf("changes: %+v", got)
		}
	})
}

func TestAllocated(t *testing.T) {
	c := &resourcev1.ResourceClaim{Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
			{Driver: Driver, Pool: "n1", Device: "ip-0"},
			{Driver: "gpu.example.com", Pool: "n1", Device: "gpu-0"},
			{Driver: Driver, Pool: "n1", Device: "ip-3"},
		}},
	}}}
	got := Allocated(c)
	if len(got) != 1 || !slices.Equal(got["n1"], []string{"ip-0", "ip-3"}) {
		t.Errorf("Allocated = %v", got)
	}
	if Allocated(&resourcev1.ResourceClaim{}) != nil || Allocated(nil) != nil {
		t.Error("an unallocated claim holds devices")
	}
}
