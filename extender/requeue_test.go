package extender

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
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

// TestLedgerFeedsWaiting: filter records a pod rejected for exhausted IPs;
// deleting a bound pod, dropping a reservation or growing a node frees room
// and so makes Next touch it; a pod that fits or binds is forgotten.
func TestLedgerFeedsWaiting(t *testing.T) {
	w := NewWaiting(nil)
	l := NewLedger(LedgerOptions{DefaultCapacity: 10, Waiting: w})
	l.SetNode(node("a", "1"))
	held := pod("held", "a", 1)
	l.SetPod(held)
	tooBig := pod("big", "", 5)
	l.filter(namesArgs(tooBig, "a"), new(Scratch))
	if w.Len() != 0 {
		t.Fatal("a pod rejected because the capacity is too small waits for nothing")
	}
	waiting := pod("p5", "", 1)
	l.filter(namesArgs(waiting, "a"), new(Scratch))
	if w.Len() != 1 {
		t.Fatalf("waiting %d, want the exhausted pod", w.Len())
	}
	if got := w.Next(); len(got) != 0 {
		t.Fatalf("touched %v before any release", touched(got))
	}
	l.DeletePod(held.UID)
	if got := touched(w.Next()); fmt.Sprint(got) != "[p5]" {
		t.Fatalf("after the delete touched %v, want [p5]", got)
	}
	// Its retry fits: it is touched no more, and once bound it is gone and
	// its reuse time observed.
	l.filter(namesArgs(waiting, "a"), new(Scratch))
	l.DeletePod("uid-nobody") // no release: nothing to touch
	if got := w.Next(); len(got) != 0 {
		t.Fatalf("touched %v after the pod fit", touched(got))
	}
	boundP5 := waiting.DeepCopy()
	boundP5.Spec.NodeName, boundP5.Status.Phase = "a", v1.PodRunning
	l.SetPod(boundP5)
	if w.Len() != 0 {
		t.Fatalf("a bound pod still waits")
	}
	if n := testutil.CollectAndCount(l.metrics.FreedIPReuse); n != 1 {
		t.Fatalf("reuse histogram has %d series", n)
	}
	if got := histogramCount(t, l.metrics.FreedIPReuse); got != 1 {
		t.Fatalf("reuse histogram observed %d binds, want 1", got)
	}

	// A node's capacity growing frees room too.
	l.SetPod(pod("held2", "a", 1))
	other := pod("p6", "", 1)
	l.filter(namesArgs(other, "a"), new(Scratch))
	l.SetNode(node("a", "3"))
	if got := touched(w.Next()); fmt.Sprint(got) != "[p6]" {
		t.Fatalf("after the node grew touched %v, want [p6]", got)
	}
	// Bound through the informer: forgotten.
	bound := other.DeepCopy()
	bound.Spec.NodeName, bound.Status.Phase = "a", v1.PodRunning
	l.SetPod(bound)
	if w.Len() != 0 {
		t.Fatalf("a bound pod still waits")
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
