package ipreport

import (
	"fmt"
	"sort"
	"strings"
)

// Sort orders.
const (
	SortName     = "name"
	SortFree     = "free"
	SortUsed     = "used"
	SortCapacity = "capacity"
)

// SortOrders are the values Filter.SortBy takes.
var SortOrders = []string{SortName, SortFree, SortUsed, SortCapacity}

// Filter picks and orders the nodes of a report.
type Filter struct {
	// Names keeps only these nodes; each must exist.
	Names []string
	// Full keeps nodes with no IP free.
	Full bool
	// MinFree keeps nodes with at least this many IPs free.
	MinFree int64
	// Invalid keeps nodes whose capacity is invalid.
	Invalid bool
	// SortBy is one of SortOrders: by name, or the most first.
	SortBy string
}

// Validate says what is wrong with f, naming the flag.
func (f Filter) Validate() error {
	switch {
	case f.MinFree < 0:
		return fmt.Errorf("--min-free must be 0 or more, got %d", f.MinFree)
	case f.Full && f.MinFree > 0:
		return fmt.Errorf("--full and --min-free=%d cannot both hold: a full node has no IP free", f.MinFree)
	}
	for _, o := range SortOrders {
		if f.SortBy == o || f.SortBy == "" {
			return nil
		}
	}
	return fmt.Errorf("--sort-by=%q: must be one of %s", f.SortBy, strings.Join(SortOrders, ", "))
}

// Apply returns rep with only the nodes f keeps, in f's order, and totals
// and uncounted pods over those nodes (Waiting stays the cluster's). A name in f.Names that
// is not in rep is an error.
func (f Filter) Apply(rep Report) (Report, error) {
	if err := f.Validate(); err != nil {
		return Report{}, err
	}
	named, want := map[string]bool{}, map[string]bool{}
	for _, n := range f.Names {
		named[n], want[n] = true, true
	}
	kept := make([]Node, 0, len(rep.Nodes))
	for _, n := range rep.Nodes {
		if len(named) > 0 && !named[n.Name] {
			continue
		}
		delete(want, n.Name)
		if (f.Full && n.Free > 0) || n.Free < f.MinFree || (f.Invalid && n.Invalid == "") {
			continue
		}
		kept = append(kept, n)
	}
	if len(want) > 0 {
		missing := make([]string, 0, len(want))
		for n := range want {
			missing = append(missing, n)
		}
		sort.Strings(missing)
		return Report{}, fmt.Errorf("nodes not found: %s", strings.Join(missing, ", "))
	}
	key := map[string]func(Node) int64{
		SortFree:     func(n Node) int64 { return n.Free },
		SortUsed:     func(n Node) int64 { return n.Used },
		SortCapacity: func(n Node) int64 { return n.Capacity },
	}[f.SortBy]
	if key != nil {
		sort.SliceStable(kept, func(i, j int) bool { return key(kept[i]) > key(kept[j]) })
	}
	rep.Nodes = kept
	rep.Totals = totals(kept, len(rep.Waiting))
	if rep.Uncounted != nil {
		shown := make(map[string]bool, len(kept))
		for _, n := range kept {
			shown[n.Name] = true
		}
		var uncounted []UncountedPod
		for _, p := range rep.Uncounted {
			if shown[p.Node] {
				uncounted = append(uncounted, p)
			}
		}
		rep.Uncounted = uncounted
	}
	return rep, nil
}
