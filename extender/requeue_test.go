package extender

import (
	"fmt"
	"slices"
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

// TestWaitingFreedOn: a release on a named node touches only the pods that
// may go there, the nodes their latest filter saw when few, and never a pod
// pinned elsewhere, however long it has waited. A pod whose filter saw more
// than maxReach nodes (or none named) may go anywhere.
func TestWaitingFreedOn(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	w := NewWaiting(clk)
	many := make([]string, maxReach+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	seen := []string{"n1"}
	pods := []struct {
		name  string
		nodes []string
	}{{"on-n1", seen}, {"on-n2-n3", []string{"n2", "n3"}}, {"anywhere", nil}, {"many", many}}
	nodes := map[string][]string{}
	for _, r := range pods {
		w.Rejected(types.UID(r.name), "ns", r.name, 0, 1, r.nodes...)
		nodes[r.name] = slices.Clone(r.nodes)
		clk.SetTime(clk.Now().Add(time.Second))
	}
	// The names are the pod's own: the request's buffer may be reused.
	seen[0] = "n2"

	for _, step := range []struct {
		node string
		n    int64
		want []string
	}{
		{node: "n3", n: 1, want: []string{"on-n2-n3"}},
		{node: "n9", n: 2, want: []string{"anywhere", "many"}},
		{node: "n1", n: 4, want: []string{"on-n1", "anywhere", "many"}},
	} {
		if !w.FreedOn(step.node, step.n) {
			t.Fatalf("FreedOn(%s) says nothing waits for it", step.node)
		}
		if got := touched(w.Next()); fmt.Sprint(got) != fmt.Sprint(step.want) {
			t.Fatalf("a release on %s touched %v, want %v", step.node, got, step.want)
		}
		for _, p := range step.want {
			w.Rejected(types.UID(p), "ns", p, 0, 1, nodes[p]...) // each retry failed again
		}
	}

	// Only pinned pods wait: a release elsewhere touches no one.
	w.Forget("anywhere")
	w.Forget("many")
	if w.FreedOn("n9", 5) {
		t.Error("FreedOn(n9) says a pod waits for it; every pod left is pinned elsewhere")
	}
	if got := w.Next(); len(got) != 0 {
		t.Errorf("a release on n9 touched %v", touched(got))
	}
	// A release anyone may use (a pod's deletion, node unknown) wakes all.
	w.Freed(2)
	if got := touched(w.Next()); fmt.Sprint(got) != "[on-n1 on-n2-n3]" {
		t.Errorf("an unnamed release touched %v, want both pinned pods", got)
	}
}
