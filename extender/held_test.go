package extender

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// running is a pod bound to node and running.
func running(name, node string, need int64) *v1.Pod {
	p := pod(name, node, need)
	p.Status.Phase = v1.PodRunning
	p.Status.PodIPs = []v1.PodIP{{IP: "192.0.2.10"}}
	return p
}

// noIPYet is p bound before its CNI ADD: its node has written no IP.
func noIPYet(p *v1.Pod) *v1.Pod {
	p = p.DeepCopy()
	p.Status.PodIPs, p.Status.PodIP = nil, ""
	return p
}

// forced is p as a grace-0 delete leaves it (deletionGracePeriodSeconds 0).
func forced(p *v1.Pod) *v1.Pod {
	p = p.DeepCopy()
	now := metav1.Now()
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, ptr.To[int64](0)
	return p
}

// fullTracker is a tracker over node a (capacity 2) holding two running
// pods, whose timers run only when the test says.
func fullTracker(t *testing.T, annotations map[string]string) (*Tracker, map[time.Duration][]func(), *[]string) {
	t.Helper()
	n := node("a", "2")
	for k, v := range annotations {
		n.Annotations[k] = v
	}
	timers := map[time.Duration][]func(){}
	changed := &[]string{}
	tr := &Tracker{Ledger: NewLedger(LedgerOptions{DefaultCapacity: 10}), Waiting: NewWaiting(nil), Metrics: NewMetrics(nil),
		after:        func(d time.Duration, f func()) { timers[d] = append(timers[d], f) },
		UsageChanged: func(node string) { *changed = append(*changed, node) }}
	tr.SetNode(n)
	tr.onPod(running("p1", "a", 1))
	tr.onPod(running("p2", "a", 1))
	return tr, timers, changed
}

// TestLedgerHoldsForceDeletedPod: a force-deleted pod's IP stays charged
// to its node for the hold, and comes back when it ends; the ledger's
// report lists it as held.
func TestLedgerHoldsForceDeletedPod(t *testing.T) {
	tr, timers, changed := fullTracker(t, nil)
	tr.onPodDelete(forced(running("p1", "a", 1)))
	u := tr.Ledger.Usage("a")
	if u.Used != 1 || u.Held != 1 || u.Free() != 0 {
		t.Fatalf("usage during the hold = %+v (free %d), want 1 used, 1 held, 0 free", u, u.Free())
	}
	if v := Fits(u, 1); v.Fit || v.Cause != CauseExhausted {
		t.Fatalf("Fits during the hold = %+v, want exhausted", v)
	}
	rep := tr.Ledger.Report()
	if ps := rep.Nodes[0].Pods; len(ps) != 2 || ps[0].State != "held" && ps[1].State != "held" {
		t.Errorf("report pods %+v, want p1 held", ps)
	}
	fs := timers[underlay.MinKillGrace+underlay.TeardownAllowance]
	if len(fs) != 1 {
		t.Fatalf("timers %v, want one of %v", timers, underlay.MinKillGrace+underlay.TeardownAllowance)
	}
	*changed = nil
	fs[0]()
	if u := tr.Ledger.Usage("a"); u.Held != 0 || u.Free() != 1 {
		t.Fatalf("usage after the hold = %+v, want 1 free", u)
	}
	if len(*changed) != 1 || (*changed)[0] != "a" {
		t.Errorf("UsageChanged after the hold: %v, want [a] (native mode republishes)", *changed)
	}
}

// TestLedgerGracefulDeleteNotHeld: a pod the kubelet finished (terminal, or
// its previous object from a filtered watch, terminating with its grace)
// frees its IP at once.
func TestLedgerGracefulDeleteNotHeld(t *testing.T) {
	graceful := running("p1", "a", 1)
	now := metav1.Now()
	graceful.DeletionTimestamp, graceful.DeletionGracePeriodSeconds = &now, ptr.To[int64](30)
	terminal := forced(running("p1", "a", 1))
	terminal.Status.Phase = v1.PodFailed
	for _, p := range []*v1.Pod{graceful, terminal, running("p1", "a", 1)} {
		tr, timers, _ := fullTracker(t, nil)
		tr.onPodDelete(p)
		if u := tr.Ledger.Usage("a"); u.Held != 0 || u.Free() != 1 || len(timers) != 0 {
			t.Errorf("%+v: usage %+v, timers %v; want 1 free, no hold", p.ObjectMeta, u, timers)
		}
	}
}

// TestLedgerHoldExpiresAndNodeGone: Expire ends a hold whose timer did not
// run; a deleted node ends its holds; a tombstone is held for its grace.
func TestLedgerHoldExpiresAndNodeGone(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	l := NewLedger(LedgerOptions{DefaultCapacity: 10, Clock: clk})
	l.SetNode(node("a", "2"))
	l.SetPod(running("p1", "a", 1))
	l.HoldDeleted(Compact(forced(running("p1", "a", 1))), 7*time.Second)
	if _, room := l.Expire(); room != 0 || l.Usage("a").Held != 1 {
		t.Fatalf("Expire before the hold's end freed %d", room)
	}
	clk.Step(8 * time.Second)
	if _, room := l.Expire(); room != 1 || l.Usage("a").Held != 0 {
		t.Fatalf("Expire after the hold freed %d, held %d; want 1, 0", room, l.Usage("a").Held)
	}
	l.SetPod(running("p2", "a", 1))
	l.HoldDeleted(Compact(forced(running("p2", "a", 1))), time.Minute)
	l.DeleteNode("a")
	l.SetNode(node("a", "2"))
	if u := l.Usage("a"); u.Held != 0 {
		t.Fatalf("held %d after the node was deleted and came back, want 0", u.Held)
	}

	tr, timers, _ := fullTracker(t, nil)
	tomb := running("p1", "a", 1)
	tomb.Spec.TerminationGracePeriodSeconds = ptr.To[int64](20)
	tr.onPodDelete(cache.DeletedFinalStateUnknown{Key: "ns/p1", Obj: tomb})
	if len(timers[20*time.Second+underlay.TeardownAllowance]) != 1 {
		t.Fatalf("tombstone timers %v, want its grace plus the allowance", timers)
	}
}

// TestLedgerIPAMReport: with the IPAM's report, the node is charged the
// union of it and the pods (underlay.Charged): a force-deleted pod's hold
// stays beside a report the mirror may have written before the delete, a
// lower report frees room once the hold is over, and a report above the
// pods wins.
func TestLedgerIPAMReport(t *testing.T) {
	tr, timers, _ := fullTracker(t, map[string]string{names.UnderlayIPSourceUsedAnnotation: "2"})
	tr.onPodDelete(forced(running("p1", "a", 1)))
	if u := tr.Ledger.Usage("a"); u.Free() != 0 || !u.IPAM.Reported {
		t.Fatalf("usage with the IPAM at 2 = %+v, want 0 free", u)
	}
	n := node("a", "2")
	n.Annotations[names.UnderlayIPSourceUsedAnnotation] = "1"
	if c := tr.Ledger.SetNode(n); c.Freed != 0 {
		t.Fatalf("the IPAM reports 1 during the hold: freed %d, want 0 (the hold stays)", c.Freed)
	}
	if node, room := tr.Ledger.EndHold("uid-p1"); node != "a" || room != 1 {
		t.Fatalf("the hold's end freed %d on %q, want 1 on a", room, node)
	}
	// Used above what the pods hold: the IPAM wins.
	n.Annotations[names.UnderlayIPSourceUsedAnnotation] = "2"
	tr.Ledger.SetNode(n)
	for _, f := range timers[underlay.MinKillGrace+underlay.TeardownAllowance] {
		f()
	}
	if u := tr.Ledger.Usage("a"); u.Free() != 0 {
		t.Fatalf("usage with the IPAM at 2 after the hold = %+v, want 0 free", u)
	}
	n.Annotations[names.UnderlayIPSourceUsedAnnotation] = "1"
	if c := tr.Ledger.SetNode(n); c.Freed != 1 {
		t.Fatalf("the IPAM released an IP: freed %d, want 1", c.Freed)
	}
}

// TestLedgerIPAMReportUnion is issue 55 §3 in the ledger: a node of 4
// whose IPAM lists 3 (2 running pods and a force-deleted one's IP, not yet
// given back by its CNI DEL). The replacement, bound before its CNI ADD,
// is not in that list: the node is full, where the larger of the two
// counts (3 and 3) left one free and a fourth pod would have been bound
// beyond the pool.
func TestLedgerIPAMReportUnion(t *testing.T) {
	n := node("a", "4")
	n.Annotations[names.UnderlayIPSourceUsedAnnotation] = "3"
	tr := &Tracker{Ledger: NewLedger(LedgerOptions{DefaultCapacity: 10}), Waiting: NewWaiting(nil), Metrics: NewMetrics(nil),
		after: func(time.Duration, func()) {}}
	tr.SetNode(n)
	tr.onPod(running("p1", "a", 1))
	tr.onPod(running("p2", "a", 1))
	tr.onPod(noIPYet(running("b", "a", 1)))
	if u := tr.Ledger.Usage("a"); u.Free() != 0 || u.Unlisted != 1 {
		t.Fatalf("usage = %+v (free %d), want 1 unlisted and 0 free", u, u.Free())
	}
	if v := Fits(tr.Ledger.Usage("a"), 1); v.Fit || !strings.Contains(v.Reason, "1 of the pods' 3 have no IP yet") {
		t.Fatalf("Fits = %+v, want refused naming the pod with no IP yet", v)
	}
	// Its ADD done, its IP written; the mirror has not counted it yet.
	tr.onPod(running("b", "a", 1))
	if u := tr.Ledger.Usage("a"); u.Free() != 1 {
		t.Fatalf("usage once b has its IP = %+v (free %d), want 1 free", u, u.Free())
	}
	if got := tr.Ledger.Unlisted("a"); got != 0 {
		t.Fatalf("Unlisted = %d, want 0", got)
	}
}

// TestCompactNodeKeepsIPAMUsed: the node cache keeps the IPAM's report, or
// the ledger and the publisher would never see it (the e2e suite's
// TestCapacitySourceUsed caught that).
func TestCompactNodeKeepsIPAMUsed(t *testing.T) {
	n := node("a", "3")
	n.Annotations[names.UnderlayIPSourceUsedAnnotation] = "3"
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	l.SetNode(CompactNode(n))
	if u := l.Usage("a"); !u.IPAM.Reported || u.IPAM.Used != 3 || u.Free() != 0 {
		t.Fatalf("usage from the cached node = %+v, want the IPAM's 3 in use and 0 free", u)
	}
}
