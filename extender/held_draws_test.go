package extender

import (
	"testing"
	"time"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestLedgerHoldsDrawsCharge: on a node that draws all, a force-deleted
// pod that asked for no IP held one (its draws charge): it stays charged
// as held for the hold, and the IPAM's report, when there is one, is
// compared with the pods' draws charges.
func TestLedgerHoldsDrawsCharge(t *testing.T) {
	timers := map[time.Duration][]func(){}
	tr := &Tracker{Ledger: NewLedger(LedgerOptions{DefaultCapacity: 10}), Waiting: NewWaiting(nil), Metrics: NewMetrics(nil),
		after: func(d time.Duration, f func()) { timers[d] = append(timers[d], f) }}
	n := node("a", "2")
	n.Annotations[names.UnderlayIPDrawsAnnotation] = underlay.DrawsAll
	tr.SetNode(n)
	tr.onPod(running("p1", "a", 0))
	tr.onPod(running("p2", "a", 0))
	if u := tr.Ledger.Usage("a"); u.Used != 2 || u.Free() != 0 {
		t.Fatalf("usage = %+v (free %d), want the two unasking pods charged 2, 0 free", u, u.Free())
	}
	tr.onPodDelete(forced(running("p1", "a", 0)))
	if u := tr.Ledger.Usage("a"); u.Used != 1 || u.Held != 1 || u.Free() != 0 {
		t.Fatalf("usage during the hold = %+v (free %d), want 1 used, 1 held, 0 free", u, u.Free())
	}
	for _, fs := range timers {
		for _, f := range fs {
			f()
		}
	}
	if u := tr.Ledger.Usage("a"); u.Used != 1 || u.Held != 0 || u.Free() != 1 {
		t.Fatalf("usage after the hold = %+v (free %d), want 1 used, 1 free", u, u.Free())
	}
	// The IPAM reports 1 in use: the larger of it and the pods' charges (1).
	n.Annotations[names.UnderlayIPSourceUsedAnnotation] = "1"
	tr.SetNode(n)
	if u := tr.Ledger.Usage("a"); u.Free() != 1 {
		t.Fatalf("usage with the IPAM's report = %+v (free %d), want 1 free", u, u.Free())
	}
	n.Annotations[names.UnderlayIPSourceUsedAnnotation] = "2"
	tr.SetNode(n)
	if u := tr.Ledger.Usage("a"); u.Free() != 0 {
		t.Fatalf("usage with the IPAM's report of 2 = %+v (free %d), want 0 free", u, u.Free())
	}
}
