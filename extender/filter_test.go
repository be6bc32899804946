package extender

import (
	"reflect"
	"testing"
)

func TestFilterDecision(t *testing.T) {
	roomy := NodeUsage{Known: true, Capacity: 10, Used: 2}  // 8 free
	tight := NodeUsage{Known: true, Capacity: 3, Used: 1}   // 2 free
	full := NodeUsage{Known: true, Capacity: 2, Used: 2}    // exhausted
	small := NodeUsage{Known: true, Capacity: 1}            // too small for 2
	bad := NodeUsage{Known: true, CapacityError: "invalid"} // unresolvable
	unknown := NodeUsage{}                                  // not seen
	tests := []struct {
		name       string
		need       int64
		usages     []NodeUsage
		wantKept   []int
		wantRej    []int
		wantCauses []CauseCount
		wantWaits  bool
	}{
		{name: "most free only, by count", need: 1, usages: []NodeUsage{tight, roomy, full, roomy},
			wantKept: []int{1, 3}, wantRej: []int{2}, wantCauses: []CauseCount{{CauseExhausted, 1}}},
		{name: "nowhere, one exhausted: waits", need: 2, usages: []NodeUsage{full, small, bad, unknown},
			wantKept: []int{}, wantRej: []int{0, 1, 2, 3}, wantWaits: true,
			wantCauses: []CauseCount{{CauseExhausted, 1}, {CauseCapacityTooSmall, 1}, {CauseInvalidCapacity, 1}, {CauseUnknownNode, 1}}},
		{name: "nowhere, no release helps: does not wait", need: 2, usages: []NodeUsage{small, bad},
			wantKept: []int{}, wantRej: []int{0, 1},
			wantCauses: []CauseCount{{CauseCapacityTooSmall, 1}, {CauseInvalidCapacity, 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Filter(tc.need, tc.usages, Filtered{Kept: []int{}})
			var rej []int
			for _, r := range got.Rejected {
				rej = append(rej, r.Index)
				if r.Verdict.Fit || r.Verdict.Reason == "" {
					t.Errorf("rejected %d with verdict %+v", r.Index, r.Verdict)
				}
			}
			if !reflect.DeepEqual(got.Kept, tc.wantKept) || !reflect.DeepEqual(rej, tc.wantRej) ||
				!reflect.DeepEqual(got.Causes, tc.wantCauses) || got.Waits() != tc.wantWaits {
				t.Errorf("Filter = kept %v rejected %v causes %v waits %v, want %v %v %v %v",
					got.Kept, rej, got.Causes, got.Waits(), tc.wantKept, tc.wantRej, tc.wantCauses, tc.wantWaits)
			}
		})
	}
}

func TestRescues(t *testing.T) {
	u := NodeUsage{Known: true, Capacity: 3, Used: 3}
	if Rescues(u, 1, 2) {
		t.Error("freeing 1 of 3 made room for 2")
	}
	if !Rescues(u, 2, 2) {
		t.Error("freeing 2 of 3 did not make room for 2")
	}
	if Rescues(NodeUsage{Known: true, CapacityError: "bad"}, 5, 1) {
		t.Error("evicting on an invalid node rescued the pod")
	}
}
