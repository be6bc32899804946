package extender

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func touched(ts []Touch) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

func TestWaitingNext(t *testing.T) {
	type rej struct {
		name string
		prio int32
		need int64
	}
	tests := []struct {
		name     string
		rejected []rej
		freed    int64
		want     []string
	}{
		{name: "nothing freed, nothing touched", rejected: []rej{{"a", 0, 1}}, freed: 0, want: nil},
		{name: "one IP, oldest of equal priority", rejected: []rej{{"a", 0, 1}, {"b", 0, 1}}, freed: 1, want: []string{"a"}},
		{name: "higher priority first", rejected: []rej{{"a", 0, 1}, {"b", 100, 1}, {"c", 5, 1}}, freed: 2, want: []string{"b", "c"}},
		{name: "a pod spends its need", rejected: []rej{{"a", 0, 3}, {"b", 0, 1}}, freed: 3, want: []string{"a"}},
		{name: "more IPs than pods touches each once", rejected: []rej{{"a", 0, 1}, {"b", 0, 1}}, freed: 20, want: []string{"a", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
			w := NewWaiting(clk)
			for _, r := range tc.rejected {
				w.Rejected(types.UID(r.name), "ns", r.name, r.prio, r.need)
				clk.SetTime(clk.Now().Add(time.Second))
			}
			w.Freed(tc.freed)
			got := touched(w.Next())
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("touched %v, want %v", got, tc.want)
			}
			if again := w.Next(); len(again) != 0 {
				t.Errorf("second Next touched %v again within one release", touched(again))
			}
		})
	}
}

// TestWaitingCreditComesBack: a touched pod that is rejected again (the IP
// went elsewhere, or it cannot use that node) lets the next pod try, but one
// freed IP never causes more than triesPerFreedIP writes.
func TestWaitingCreditComesBack(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	w := NewWaiting(clk)
	for i := range 10 {
		w.Rejected(types.UID(fmt.Sprint(i)), "ns", fmt.Sprint(i), 0, 1)
		clk.SetTime(clk.Now().Add(time.Second))
	}
	w.Freed(1)
	writes := 0
	for range 20 {
		next := w.Next()
		if len(next) == 0 {
			break
		}
		if len(next) != 1 {
			t.Fatalf("touched %v for one IP", touched(next))
		}
		writes++
		w.Rejected(next[0].UID, "ns", next[0].Name, 0, 1) // its retry failed again
	}
	if writes != triesPerFreedIP {
		t.Fatalf("%d writes for one freed IP, want %d", writes, triesPerFreedIP)
	}
}

// TestWaitingGoneGivesCreditBack: the pending pod deleted unseen is the
// oldest waiter, so a freed IP touches it first; when the touch finds it
// gone, the IP goes to the pod that still waits, not to the next release.
func TestWaitingGoneGivesCreditBack(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	w := NewWaiting(clk)
	w.Rejected("deleted", "ns", "deleted", 0, 1)
	clk.SetTime(clk.Now().Add(time.Second))
	w.Rejected("live", "ns", "live", 0, 1)
	w.Freed(1)
	if got := touched(w.Next()); fmt.Sprint(got) != "[deleted]" {
		t.Fatalf("first touch %v, want [deleted]", got)
	}
	w.Gone("deleted")
	if got := touched(w.Next()); fmt.Sprint(got) != "[live]" {
		t.Fatalf("after the touch found it gone, touched %v, want [live]", got)
	}
	if w.Len() != 1 {
		t.Errorf("Len = %d, want 1 (live)", w.Len())
	}
}

func TestWaitingOutstandingTimesOut(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	w := NewWaiting(clk)
	w.Rejected("a", "ns", "a", 0, 1)
	w.Rejected("b", "ns", "b", 0, 1)
	w.Freed(1)
	if got := touched(w.Next()); fmt.Sprint(got) != "[a]" {
		t.Fatalf("touched %v, want [a]", got)
	}
	if !w.Outstanding() {
		t.Fatal("a's retry should be outstanding")
	}
	clk.SetTime(clk.Now().Add(outstandingTimeout + time.Second))
	if got := touched(w.Next()); fmt.Sprint(got) != "[b]" {
		t.Fatalf("after a's retry never came, touched %v, want [b]", got)
	}
}

func TestWaitingForgetAndBound(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	w := NewWaiting(clk)
	w.Rejected("a", "ns", "a", 0, 1)
	w.Rejected("b", "ns", "b", 0, 1)
	w.Rejected("c", "ns", "c", 0, 1)
	if _, ok := w.Bound("a"); ok {
		t.Error("a bound with no release before it observed a reuse time")
	}
	clk.SetTime(clk.Now().Add(time.Second))
	w.Freed(1)
	clk.SetTime(clk.Now().Add(1500 * time.Millisecond))
	if d, ok := w.Bound("b"); !ok || d != 1500*time.Millisecond {
		t.Errorf("Bound(b) = %v, %v; want 1.5s since the release", d, ok)
	}
	w.Forget("c")
	if w.Len() != 0 {
		t.Errorf("%d still waiting", w.Len())
	}
	if w.Freed(5) {
		t.Error("Freed with nobody waiting reported work")
	}
	if got := w.Next(); len(got) != 0 {
		t.Errorf("touched %v with nobody waiting", touched(got))
	}
	// Stale entries go after waitingTTL.
	w.Rejected("d", "ns", "d", 0, 1)
	clk.SetTime(clk.Now().Add(waitingTTL + time.Second))
	w.Next()
	if w.Len() != 0 {
		t.Errorf("stale pod kept: %d waiting", w.Len())
	}
}

// The gauge is the set as it is when scraped: the soak compares it with the
// Pending pods of the last few seconds, and a value the requeuer had set on
// its previous tick still counted pods the pending watch had dropped.
func TestWaitingGaugeIsTheSetNow(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	w := NewWaiting(nil)
	RegisterWaiting(reg, w)
	gauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 {
			t.Fatalf("gathering: %v, %d families", err, len(mfs))
		}
		return mfs[0].GetMetric()[0].GetGauge().GetValue()
	}
	w.Rejected("a", "ns", "a", 0, 1)
	w.Rejected("b", "ns", "b", 0, 1)
	if g := gauge(); g != 2 {
		t.Fatalf("after two rejections the gauge reads %v, want 2", g)
	}
	w.Gone("a")
	if g := gauge(); g != 1 {
		t.Errorf("after the pending watch dropped a, the gauge reads %v, want 1", g)
	}
	empty := prometheus.NewPedanticRegistry()
	RegisterWaiting(empty, nil)
	if _, err := empty.Gather(); err != nil {
		t.Errorf("a nil set (requeue off) must still serve the gauge: %v", err)
	}
}
