package extender

import "slices"

// Filter and Rescues are the verbs' decisions over plain usages. The wire
// (extender/wire) reads the candidates, asks the ledger for their usages,
// calls these, counts and answers; nothing here knows HTTP.

// Rejected is a candidate without room for the pod.
type Rejected struct {
	// Index is the candidate's position in the usages given to Filter.
	Index   int
	Verdict Verdict
}

// CauseCount counts the rejected candidates of one cause.
type CauseCount struct {
	Cause string
	N     int
}

// Filtered is Filter's decision. Its slices are the ones passed in, reused.
type Filtered struct {
	// Kept are the indexes of the candidates to keep, in order: those
	// where the pod fits with the most free IPs (MostFree).
	Kept []int
	// Rejected are the candidates where the pod does not fit, in order.
	// Fitting candidates with fewer free IPs are neither kept nor rejected.
	Rejected []Rejected
	// Causes counts Rejected by Verdict.Cause: a handful, so a list.
	Causes []CauseCount
}

// Waits reports whether the pod now waits for IPs to be freed: no candidate
// was kept and on at least one the IPs were used up (not a capacity too
// small, which no release fixes).
func (f Filtered) Waits() bool { return f.waitsFor(CauseExhausted) }

// WaitsForCapacity is Waits where a node's capacity may also grow with no
// Node event to retry the pod (the extender reads the capacity sources
// itself): a capacity too small, or not valid yet, waits too.
func (f Filtered) WaitsForCapacity() bool {
	return f.waitsFor(CauseExhausted, CauseCapacityTooSmall, CauseInvalidCapacity)
}

func (f Filtered) waitsFor(causes ...string) bool {
	if len(f.Kept) > 0 {
		return false
	}
	for _, c := range f.Causes {
		if slices.Contains(causes, c.Cause) {
			return true
		}
	}
	return false
}

// Filter decides, for a pod that needs need IPs (> 0), which of the
// candidates with the given usages to keep and why each other one fails.
// It keeps only the most free so that "most free IPs first" is exact and
// kube-scheduler's own scores break the tie among them. into's slices are
// reset and reused.
func Filter(need int64, usages []NodeUsage, into Filtered) Filtered {
	out := Filtered{Kept: into.Kept[:0], Rejected: into.Rejected[:0], Causes: into.Causes[:0]}
	vs := verdicts{need: need}
	best := MostFree(need, usages)
	for i := range usages {
		v := vs.of(usages[i])
		if !v.Fit {
			out.Rejected = append(out.Rejected, Rejected{Index: i, Verdict: v})
			out.Causes = countCause(out.Causes, v.Cause)
			continue
		}
		if usages[i].Free() >= best {
			out.Kept = append(out.Kept, i)
		}
	}
	return out
}

func countCause(counts []CauseCount, cause string) []CauseCount {
	for i := range counts {
		if counts[i].Cause == cause {
			counts[i].N++
			return counts
		}
	}
	return append(counts, CauseCount{Cause: cause, N: 1})
}

// Rescues reports whether evicting victims holding freed IPs from a node
// with usage u makes room for need: preemption's check.
func Rescues(u NodeUsage, freed, need int64) bool {
	u.Used = max(0, u.Used-freed)
	return Fits(u, need).Fit
}
