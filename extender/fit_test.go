package extender

import (
	"reflect"
	"testing"
)

func TestFits(t *testing.T) {
	tests := []struct {
		name             string
		usage            NodeUsage
		need             int64
		wantFit          bool
		wantUnresolvable bool
		wantCause        string
		wantReason       string
	}{
		{name: "no need fits anything", usage: NodeUsage{}, need: 0, wantFit: true},
		{name: "room", usage: NodeUsage{Known: true, Capacity: 10, Used: 9}, need: 1, wantFit: true},
		{name: "exhausted", usage: NodeUsage{Known: true, Capacity: 10, Used: 10}, need: 1,
			wantCause: CauseExhausted, wantReason: "underlay IPs exhausted: 10/10 used, pod needs 1"},
		{name: "reservations count as used", usage: NodeUsage{Known: true, Capacity: 10, Used: 8, Reserved: 2}, need: 1,
			wantCause: CauseExhausted, wantReason: "underlay IPs exhausted: 10/10 used, pod needs 1"},
		{name: "needs two, one free", usage: NodeUsage{Known: true, Capacity: 3, Used: 2}, need: 2,
			wantCause: CauseExhausted, wantReason: "underlay IPs exhausted: 2/3 used, pod needs 2"},
		{name: "over capacity after annotation lowered", usage: NodeUsage{Known: true, Capacity: 3, Used: 5}, need: 1,
			wantCause: CauseExhausted, wantReason: "underlay IPs exhausted: 5/3 used, pod needs 1"},
		{name: "zero capacity", usage: NodeUsage{Known: true, Capacity: 0}, need: 1, wantUnresolvable: true,
			wantCause: CauseCapacityTooSmall, wantReason: "underlay IP capacity too small: node has 0, pod needs 1"},
		{name: "invalid annotation", usage: NodeUsage{Known: true, CapacityError: "invalid x annotation"}, need: 1, wantUnresolvable: true,
			wantCause: CauseInvalidCapacity, wantReason: "invalid x annotation, pod needs 1"},
		{name: "unknown node", usage: NodeUsage{}, need: 1,
			wantCause: CauseUnknownNode, wantReason: "node is unknown to the underlay IP extender"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := Fits(tc.usage, tc.need)
			want := Verdict{Fit: tc.wantFit, Unresolvable: tc.wantUnresolvable, Cause: tc.wantCause, Reason: tc.wantReason}
			if v != want {
				t.Fatalf("Fits = %+v, want %+v", v, want)
			}
		})
	}
}

func TestFree(t *testing.T) {
	if got := (NodeUsage{Capacity: 3, Used: 5}).Free(); got != 0 {
		t.Errorf("Free of an over-committed node = %d, want 0", got)
	}
	if got := (NodeUsage{Capacity: 10, Used: 3, Reserved: 2}).Free(); got != 5 {
		t.Errorf("Free = %d, want 5", got)
	}
}

func TestScores(t *testing.T) {
	k := func(capacity, used int64) NodeUsage { return NodeUsage{Known: true, Capacity: capacity, Used: used} }
	tests := []struct {
		name   string
		need   int64
		usages []NodeUsage
		want   []int64
	}{
		{name: "empty", need: 1, usages: nil, want: []int64{}},
		{name: "proportional to the most free", need: 1, usages: []NodeUsage{k(10, 0), k(10, 5), k(10, 9), k(10, 10)}, want: []int64{10, 5, 1, 0}},
		{name: "small nodes scale up", need: 1, usages: []NodeUsage{k(3, 1), k(3, 2)}, want: []int64{10, 5}},
		{name: "no node fits", need: 2, usages: []NodeUsage{k(3, 2), k(1, 0)}, want: []int64{0, 0}},
		{name: "pod needing nothing is neutral", need: 0, usages: []NodeUsage{k(10, 0), k(10, 9)}, want: []int64{0, 0}},
		{name: "unknown and invalid score 0", need: 1, usages: []NodeUsage{{}, {Known: true, CapacityError: "x"}, k(4, 0)}, want: []int64{0, 0, 10}},
		{name: "ties are equal", need: 1, usages: []NodeUsage{k(10, 2), k(10, 2)}, want: []int64{10, 10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Scores(tc.need, tc.usages, nil)
			if got == nil {
				got = []int64{}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Scores = %v, want %v", got, tc.want)
			}
			if again := Scores(tc.need, tc.usages, make([]int64, 0, 8)); len(again) > 0 && !reflect.DeepEqual(again, got) {
				t.Fatalf("Scores not deterministic: %v then %v", got, again)
			}
		})
	}
}

// TestFitsShortcuts checks fits and the verdict cache against Fits.
func TestFitsShortcuts(t *testing.T) {
	for _, need := range []int64{-1, 0, 1, 2, 5} {
		vs := verdicts{need: need}
		for _, known := range []bool{false, true} {
			for _, capErr := range []string{"", "bad"} {
				for capacity := int64(0); capacity <= 4; capacity++ {
					for used := int64(0); used <= 5; used++ {
						for reserved := int64(-1); reserved <= 2; reserved++ {
							u := NodeUsage{Known: known, Capacity: capacity, CapacityError: capErr, Used: used, Reserved: reserved}
							want := Fits(u, need)
							if got := fits(u, need); got != want.Fit {
								t.Errorf("fits(%+v, %d) = %v, want %v", u, need, got, want.Fit)
							}
							// Twice: computed, then cached.
							for range 2 {
								if got := vs.of(u); got != want {
									t.Errorf("verdicts.of(%+v) for %d = %+v, want %+v", u, need, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
}
