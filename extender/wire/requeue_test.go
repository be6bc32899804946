package wire

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/extender/extendertest/fakecluster"
)

// TestLedgerFeedsWaiting: filter (the wire) records a pod rejected for exhausted IPs;
// deleting a bound pod, dropping a reservation or growing a node frees room
// and so makes Next touch it; a pod that fits or binds is forgotten.
func TestLedgerFeedsWaiting(t *testing.T) {
	w, v, tr := waitingRig(false)
	m := v.metrics
	tr.SetNode(node("a", "1"))
	held := pod("held", "a", 1)
	tr.SetPod(extender.Compact(held))
	tooBig := pod("big", "", 5)
	v.filter(namesArgs(tooBig, "a"), new(Scratch))
	if w.Len() != 0 {
		t.Fatal("a pod rejected because the capacity is too small waits for nothing")
	}
	waiting := pod("p5", "", 1)
	v.filter(namesArgs(waiting, "a"), new(Scratch))
	if w.Len() != 1 {
		t.Fatalf("waiting %d, want the exhausted pod", w.Len())
	}
	if got := w.Next(); len(got) != 0 {
		t.Fatalf("touched %v before any release", touched(got))
	}
	tr.DeletePod(held.UID)
	if got := touched(w.Next()); fmt.Sprint(got) != "[p5]" {
		t.Fatalf("after the delete touched %v, want [p5]", got)
	}
	// Its retry fits: it is touched no more, and once bound it is gone and
	// its reuse time observed.
	v.filter(namesArgs(waiting, "a"), new(Scratch))
	tr.DeletePod("uid-nobody") // no release: nothing to touch
	if got := w.Next(); len(got) != 0 {
		t.Fatalf("touched %v after the pod fit", touched(got))
	}
	boundP5 := waiting.DeepCopy()
	boundP5.Spec.NodeName, boundP5.Status.Phase = "a", v1.PodRunning
	tr.SetPod(extender.Compact(boundP5))
	if w.Len() != 0 {
		t.Fatalf("a bound pod still waits")
	}
	if n := testutil.CollectAndCount(m.FreedIPReuse); n != 1 {
		t.Fatalf("reuse histogram has %d series", n)
	}
	if got := histogramCount(t, m.FreedIPReuse); got != 1 {
		t.Fatalf("reuse histogram observed %d binds, want 1", got)
	}

	// A node's capacity growing frees room too.
	tr.SetPod(extender.Compact(pod("held2", "a", 1)))
	other := pod("p6", "", 1)
	v.filter(namesArgs(other, "a"), new(Scratch))
	tr.SetNode(node("a", "3"))
	if got := touched(w.Next()); fmt.Sprint(got) != "[p6]" {
		t.Fatalf("after the node grew touched %v, want [p6]", got)
	}
	// Bound through the informer: forgotten.
	bound := other.DeepCopy()
	bound.Spec.NodeName, bound.Status.Phase = "a", v1.PodRunning
	tr.SetPod(extender.Compact(bound))
	if w.Len() != 0 {
		t.Fatalf("a bound pod still waits")
	}
}

// waitingRig is the wire's verbs and the informers' tracker over one
// ledger and one Waiting, as the extender wires them.
func waitingRig(capacityMoves bool) (*extender.Waiting, *verbs, *extender.Tracker) {
	w := extender.NewWaiting(nil)
	m := extender.NewMetrics(nil)
	l := extender.NewLedger(extender.LedgerOptions{DefaultCapacity: 10})
	return w, &verbs{ledger: l, waiting: w, metrics: m, capacityMoves: capacityMoves}, &extender.Tracker{Ledger: l, Waiting: w, Metrics: m}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func touched(ts []extender.Touch) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

// TestRefusedBindTellsWaiting: a Binding the API server refuses gives its
// reservation back, and the wire tells Waiting of that room, as the ledger
// itself no longer does.
func TestRefusedBindTellsWaiting(t *testing.T) {
	env := fakecluster.New(t, nil, node("a", "1"), pod("p", "", 1))
	env.API.Fail = func(*v1.Binding) error { return apierrors.NewForbidden(v1.Resource("pods/binding"), "p", nil) }
	w := extender.NewWaiting(nil)
	v := &verbs{ledger: env.Ledger, waiting: w, metrics: extender.NewMetrics(nil)}
	w.Rejected("uid-w", "ns", "w", 0, 1)
	if err := v.bind(context.Background(), env.Binder, bindArgs(pod("p", "", 1), "a")); err == nil {
		t.Fatal("bind succeeded against a refusing API server")
	}
	if got := touched(w.Next()); fmt.Sprint(got) != "[w]" {
		t.Errorf("after the refused bind touched %v, want [w]", got)
	}
	if got := testutil.ToFloat64(v.metrics.Binds.WithLabelValues(extender.BindError)); got != 1 {
		t.Errorf("binds_total{result=error} = %v, want 1", got)
	}
}

// TestCapacityMovesWaits: where the extender reads the capacity sources
// itself a node's capacity grows with no Node event, so a pod turned away
// for a capacity too small waits as for freed IPs, and the growth touches
// it; without CapacityMoves it waits for nothing (kube-scheduler retries
// it on the mirror's Node event).
func TestCapacityMovesWaits(t *testing.T) {
	for _, moves := range []bool{false, true} {
		t.Run(fmt.Sprintf("moves=%v", moves), func(t *testing.T) {
			w, v, tr := waitingRig(moves)
			tr.SetNode(node("a", "0"))
			p := pod("p", "", 1)
			v.filter(namesArgs(p, "a"), new(Scratch))
			if got, want := w.Len(), map[bool]int{false: 0, true: 1}[moves]; got != want {
				t.Fatalf("waiting %d, want %d", got, want)
			}
			tr.SetNode(node("a", "2"))
			want := map[bool]string{false: "[]", true: "[p]"}[moves]
			if got := fmt.Sprint(touched(w.Next())); got != want {
				t.Fatalf("after the node grew touched %s, want %s", got, want)
			}
		})
	}
}

// TestGrowthWakesThePodsThatMayGoThere: filter tells Waiting the nodes it
// was asked about, so a node's growth touches only the pods whose filter
// saw it (kube-scheduler sends the nodes that passed its own filters). A
// pod pinned to a is not retried for b's growth, however long it waited.
func TestGrowthWakesThePodsThatMayGoThere(t *testing.T) {
	w, v, tr := waitingRig(false)
	for _, n := range []string{"a", "b"} {
		tr.SetNode(node(n, "1"))
		tr.SetPod(extender.Compact(pod("held-"+n, n, 1)))
	}
	v.filter(namesArgs(pod("on-a", "", 1), "a"), new(Scratch))
	v.filter(namesArgs(pod("on-b", "", 1), "b"), new(Scratch))
	tr.SetNode(node("b", "2"))
	if got := touched(w.Next()); fmt.Sprint(got) != "[on-b]" {
		t.Fatalf("after b grew touched %v, want [on-b]", got)
	}
	tr.SetNode(node("a", "2"))
	if got := touched(w.Next()); fmt.Sprint(got) != "[on-a]" {
		t.Fatalf("after a grew touched %v, want [on-a]", got)
	}
}
