package extender

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capscale/capscale/internal/names"
)

func TestLedgerAccounting(t *testing.T) {
	l := newTestLedger(
		[]*v1.Node{node("a", ""), node("b", "3"), node("c", "bogus")},
		[]*v1.Pod{pod("p1", "a", 1), pod("p2", "a", 2), pod("p3", "b", 1), pod("pending", "", 1), pod("plain", "a", 0)},
	)
	check := func(name string, want NodeUsage) {
		t.Helper()
		if got := l.Usage(name); got != want {
			t.Errorf("Usage(%s) = %+v, want %+v", name, got, want)
		}
	}
	check("a", NodeUsage{Known: true, Capacity: 10, Used: 3})
	check("b", NodeUsage{Known: true, Capacity: 3, Used: 1})
	if u := l.Usage("c"); !u.Known || u.Capacity != 0 || u.CapacityError == "" {
		t.Errorf("Usage(c) = %+v, want known, capacity 0 and a reason", u)
	}
	check("nope", NodeUsage{})

	// A pod that finishes releases its IPs.
	done := pod("p2", "a", 2)
	done.Status.Phase = v1.PodSucceeded
	l.SetPod(done)
	check("a", NodeUsage{Known: true, Capacity: 10, Used: 1})

	// Deletion releases too, and is idempotent.
	l.DeletePod(pod("p1", "", 0).UID)
	l.DeletePod(pod("p1", "", 0).UID)
	check("a", NodeUsage{Known: true, Capacity: 10})

	// Capacity follows annotation changes.
	l.SetNode(node("b", "5"))
	check("b", NodeUsage{Known: true, Capacity: 5, Used: 1})

	// A deleted node still carries its pods, but has no capacity.
	l.DeleteNode("b")
	check("b", NodeUsage{Used: 1})
	l.DeletePod(pod("p3", "", 0).UID)
	if rep := l.Report(); len(rep.Nodes) != 2 {
		t.Errorf("report has %d nodes after b emptied, want 2 (a, c): %+v", len(rep.Nodes), rep.Nodes)
	}
}

// TestLedgerCapacityLabel: a Node re-created by the kubelet has lost its
// annotation but carries its --node-labels again; the label's capacity
// holds, not the default (issue 31, "capacity forgets").
func TestLedgerCapacityLabel(t *testing.T) {
	labelled := node("l", "")
	labelled.Labels[names.UnderlayIPCapacityLabel] = "3"
	overridden := node("o", "2")
	overridden.Labels[names.UnderlayIPCapacityLabel] = "3"
	l := newTestLedger([]*v1.Node{labelled, overridden}, nil)
	if u := l.Usage("l"); u.Capacity != 3 || u.CapacityError != "" {
		t.Errorf("Usage(l) = %+v, want the label's capacity 3", u)
	}
	if u := l.Usage("o"); u.Capacity != 2 {
		t.Errorf("Usage(o) = %+v, want the annotation's 2 over the label's 3", u)
	}
}

func TestLedgerReservations(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	l := NewLedger(LedgerOptions{DefaultCapacity: 2, ReservationTTL: time.Minute, Clock: clk})
	l.SetNode(node("a", ""))
	p1, p2, p3 := pod("p1", "", 1), pod("p2", "", 1), pod("p3", "", 1)

	r1 := l.Reserve(p1.UID, "ns", "p1", "a", 1)
	if !r1.Verdict.Fit || r1.Token == 0 {
		t.Fatalf("first reserve = %+v, want fit with a token", r1)
	}
	// Reserving again for the same pod replaces, never doubles.
	r1 = l.Reserve(p1.UID, "ns", "p1", "a", 1)
	if !r1.Verdict.Fit {
		t.Fatalf("re-reserve = %+v, want fit", r1)
	}
	r2 := l.Reserve(p2.UID, "ns", "p2", "a", 1)
	if !r2.Verdict.Fit {
		t.Fatalf("second reserve = %+v, want fit", r2)
	}
	if r3 := l.Reserve(p3.UID, "ns", "p3", "a", 1); r3.Verdict.Fit || r3.Verdict.Cause != CauseExhausted {
		t.Fatalf("third reserve = %+v, want exhausted", r3)
	}
	if got, _ := l.Totals(); got.Reserved != 2 {
		t.Errorf("reserved total = %v, want 2", got.Reserved)
	}

	// While p1's bind to a is unsettled, it cannot reserve on another node.
	if r := l.Reserve(p1.UID, "ns", "p1", "b", 1); r.Verdict.Fit || r.InFlightElsewhere != "a" {
		t.Fatalf("reserve elsewhere during a bind = %+v, want InFlightElsewhere a", r)
	}
	// The informer shows p1 bound: it moves from reserved to used.
	l.SetPod(pod("p1", "a", 1))
	if u := l.Usage("a"); u.Used != 1 || u.Reserved != 1 {
		t.Errorf("after p1 bound: %+v, want used 1 reserved 1", u)
	}
	if r := l.Reserve(p1.UID, "ns", "p1", "a", 1); !r.AlreadyBound {
		t.Errorf("reserve of a bound pod = %+v, want AlreadyBound", r)
	}
	if r := l.Reserve(p1.UID, "ns", "p1", "b", 1); r.BoundElsewhere != "a" {
		t.Errorf("reserve of a pod bound elsewhere = %+v, want BoundElsewhere a", r)
	}

	// A stale token releases nothing.
	l.Release(p2.UID, r2.Token+100)
	if u := l.Usage("a"); u.Reserved != 1 {
		t.Errorf("stale release changed reserved: %+v", u)
	}
	// An unconfirmed reservation survives until its TTL.
	l.Unconfirmed(p2.UID, r2.Token)
	clk.Step(30 * time.Second)
	l.Expire()
	if u := l.Usage("a"); u.Reserved != 1 {
		t.Errorf("reservation expired early: %+v", u)
	}
	clk.Step(31 * time.Second)
	if n, room := l.Expire(); n != 1 || room != 1 {
		t.Errorf("Expire = %d dropped, %d freed; want 1, 1", n, room)
	}
	if u := l.Usage("a"); u.Reserved != 0 {
		t.Errorf("reservation did not expire: %+v", u)
	}

	// Confirmed reservations never expire by time.
	r3 := l.Reserve(p3.UID, "ns", "p3", "a", 1)
	clk.Step(time.Hour)
	l.Expire()
	if u := l.Usage("a"); u.Reserved != 1 {
		t.Errorf("confirmed reservation expired: %+v", u)
	}
	l.Release(p3.UID, r3.Token)
	if u := l.Usage("a"); u.Reserved != 0 {
		t.Errorf("release did not free: %+v", u)
	}
	// Deleting a pod drops its reservation.
	r3 = l.Reserve(p3.UID, "ns", "p3", "a", 1)
	l.DeletePod(p3.UID)
	if u := l.Usage("a"); u.Reserved != 0 || !r3.Verdict.Fit {
		t.Errorf("delete did not drop the reservation: %+v", u)
	}
}

func TestLedgerOwnReservationNotCounted(t *testing.T) {
	l := newTestLedger([]*v1.Node{node("a", "1")}, nil)
	p := pod("p", "", 1)
	l.Reserve(p.UID, "ns", "p", "a", 1)
	if u := l.Usages(p.UID, []string{"a"}, nil)[0]; !Fits(u, 1).Fit {
		t.Errorf("a retried pod competes with its own reservation: %+v", u)
	}
	if u := l.Usages("other", []string{"a"}, nil)[0]; Fits(u, 1).Fit {
		t.Errorf("another pod fits into a reserved node: %+v", u)
	}
}

func TestLedgerHints(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	l := NewLedger(LedgerOptions{DefaultCapacity: 10, Clock: clk})
	l.RememberNeed("u", 2)
	l.RememberNeed("", 2)
	if n, ok := l.RememberedNeed("u"); !ok || n != 2 {
		t.Fatalf("RememberedNeed = %d, %v", n, ok)
	}
	clk.Step(hintTTL + time.Second)
	l.Expire()
	if _, ok := l.RememberedNeed("u"); ok {
		t.Fatal("hint survived its TTL")
	}
}

// TestLedgerMetrics: the totals gauges read the ledger when scraped, and
// the Tracker counts an invalid annotation once per change.
func TestLedgerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	RegisterLedger(reg, l)
	tr := &Tracker{Ledger: l, Metrics: m}
	tr.SetNode(node("a", ""))
	tr.SetNode(node("b", "3"))
	tr.SetNode(node("c", "x"))
	tr.SetNode(node("c", "x")) // unchanged: counted once
	tr.SetPod(Compact(pod("p", "a", 2)))
	l.Reserve("r", "ns", "r", "b", 1)
	want := map[string]float64{
		"capscale_extender_nodes": 3, "capscale_extender_capacity_ips": 13, "capscale_extender_used_ips": 2,
		"capscale_extender_reserved_ips": 1, "capscale_extender_invalid_capacity_annotation_nodes": 1,
		"capscale_extender_invalid_capacity_annotations_total": 1,
	}
	for name, w := range want {
		if got := gathered(t, reg, name); got != w {
			t.Errorf("%s = %v, want %v", name, got, w)
		}
	}
	tr.SetNode(node("c", "4"))
	if got := gathered(t, reg, "capscale_extender_invalid_capacity_annotation_nodes"); got != 0 {
		t.Errorf("invalid nodes after fix = %v, want 0", got)
	}
}

// gathered is the value of the unlabelled metric name in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("metric %s not gathered", name)
	return 0
}

func TestLedgerReport(t *testing.T) {
	l := newTestLedger([]*v1.Node{node("b", "3"), node("a", "")}, []*v1.Pod{pod("y", "a", 1), pod("x", "a", 2)})
	l.Reserve("uid-z", "ns", "z", "b", 1)
	rep := l.Report()
	if rep.DefaultCapacity != 10 {
		t.Errorf("defaultCapacity = %d", rep.DefaultCapacity)
	}
	want := Totals{Nodes: 2, Capacity: 13, Used: 3, Reserved: 1, Free: 9}
	if rep.Totals != want {
		t.Errorf("totals = %+v, want %+v", rep.Totals, want)
	}
	if len(rep.Nodes) != 2 || rep.Nodes[0].Name != "a" || rep.Nodes[1].Name != "b" {
		t.Fatalf("nodes not sorted: %+v", rep.Nodes)
	}
	a := rep.Nodes[0]
	if a.Free != 7 || len(a.Pods) != 2 || a.Pods[0].Name != "x" || a.Pods[0].IPs != 2 || a.Pods[0].State != "bound" {
		t.Errorf("node a = %+v", a)
	}
	b := rep.Nodes[1]
	if b.Reserved != 1 || len(b.Pods) != 1 || b.Pods[0].State != "reserved" {
		t.Errorf("node b = %+v", b)
	}
}

// TestLedgerMetricsGolden pins names, help and values of the ledger's series.
func TestLedgerMetricsGolden(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	RegisterLedger(reg, l)
	tr := &Tracker{Ledger: l, Metrics: NewMetrics(reg)}
	tr.SetNode(node("a", ""))
	tr.SetNode(node("b", "0"))
	tr.SetNode(node("c", "many"))
	tr.SetPod(Compact(pod("p", "a", 3)))
	l.Reserve("uid-q", "ns", "q", "a", 1)
	const want = `
# HELP capscale_extender_capacity_ips Underlay IP capacity summed over known nodes.
# TYPE capscale_extender_capacity_ips gauge
capscale_extender_capacity_ips 10
# HELP capscale_extender_invalid_capacity_annotation_nodes Nodes whose underlay IP capacity annotation is invalid (capacity treated as 0).
# TYPE capscale_extender_invalid_capacity_annotation_nodes gauge
capscale_extender_invalid_capacity_annotation_nodes 1
# HELP capscale_extender_invalid_capacity_annotations_total Invalid underlay IP capacity annotation values seen on node adds and changes.
# TYPE capscale_extender_invalid_capacity_annotations_total counter
capscale_extender_invalid_capacity_annotations_total 1
# HELP capscale_extender_nodes Nodes known to the extender.
# TYPE capscale_extender_nodes gauge
capscale_extender_nodes 3
# HELP capscale_extender_reserved_ips Underlay IPs reserved by binds not yet seen by the pod informer.
# TYPE capscale_extender_reserved_ips gauge
capscale_extender_reserved_ips 1
# HELP capscale_extender_used_ips Underlay IPs held by bound, non-terminal pods.
# TYPE capscale_extender_used_ips gauge
capscale_extender_used_ips 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"capscale_extender_capacity_ips", "capscale_extender_invalid_capacity_annotation_nodes",
		"capscale_extender_invalid_capacity_annotations_total", "capscale_extender_nodes",
		"capscale_extender_reserved_ips", "capscale_extender_used_ips"); err != nil {
		t.Error(err)
	}
}

// TestLedgerCompaction feeds the same changes to a ledger that compacts
// after every change and to one that compacts only when it chooses to: the
// reports must agree throughout.
func TestLedgerCompaction(t *testing.T) {
	eager := NewLedger(LedgerOptions{DefaultCapacity: 10})
	lazy := NewLedger(LedgerOptions{DefaultCapacity: 10})
	both := func(f func(l *Ledger)) {
		f(lazy)
		f(eager)
		eager.mu.Lock()
		eager.compactLocked()
		eager.mu.Unlock()
		if a, b := lazy.Report(), eager.Report(); !reflect.DeepEqual(a, b) {
			if len(a.Nodes) != len(b.Nodes) {
				t.Fatalf("reports differ: %d nodes, %d after compacting", len(a.Nodes), len(b.Nodes))
			}
			for i := range a.Nodes {
				if !reflect.DeepEqual(a.Nodes[i], b.Nodes[i]) {
					t.Fatalf("reports differ:\nlazy  %+v\neager %+v", a.Nodes[i], b.Nodes[i])
				}
			}
			t.Fatalf("reports differ:\nlazy  %+v\neager %+v", a.Totals, b.Totals)
		}
	}
	for i := range 300 {
		name := fmt.Sprintf("n%03d", i)
		both(func(l *Ledger) { l.SetNode(node(name, fmt.Sprint(i%7))) })
		both(func(l *Ledger) { l.SetPod(pod(fmt.Sprintf("p%03d", i), name, int64(i%3))) })
		if i%5 == 0 {
			both(func(l *Ledger) { l.Reserve(types.UID(fmt.Sprintf("r%03d", i)), "ns", "r", name, 1) })
		}
		if i%7 == 3 {
			both(func(l *Ledger) { l.DeleteNode(fmt.Sprintf("n%03d", i-3)) })
			both(func(l *Ledger) { l.DeletePod(types.UID(fmt.Sprintf("uid-p%03d", i-1))) })
		}
	}
	// A pod on a node the informer has not delivered, then the node.
	both(func(l *Ledger) { l.SetPod(pod("early", "late", 2)) })
	both(func(l *Ledger) { l.SetNode(node("late", "3")) })
	lazy.Expire()
	if lazy.scattered != 0 {
		t.Errorf("%d nodes left scattered after Expire", lazy.scattered)
	}
	names := []string{"n001", "n299", "late", "ghost"}
	if a, b := lazy.Usages("x", names, nil), eager.Usages("x", names, nil); !reflect.DeepEqual(a, b) {
		t.Errorf("usages differ: %+v, %+v", a, b)
	}
}
