package wire

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/extender"
)

// TestLedgerFeedsWaiting: filter (the wire) records a pod rejected for exhausted IPs;
// deleting a bound pod, dropping a reservation or growing a node frees room
// and so makes Next touch it; a pod that fits or binds is forgotten.
func TestLedgerFeedsWaiting(t *testing.T) {
	w := extender.NewWaiting(nil)
	m := extender.NewMetrics(nil)
	l := extender.NewLedger(extender.LedgerOptions{DefaultCapacity: 10, Waiting: w, Metrics: m})
	v := &verbs{ledger: l, waiting: w, metrics: m}
	l.SetNode(node("a", "1"))
	held := pod("held", "a", 1)
	l.SetPod(held)
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
	l.DeletePod(held.UID)
	if got := touched(w.Next()); fmt.Sprint(got) != "[p5]" {
		t.Fatalf("after the delete touched %v, want [p5]", got)
	}
	// Its retry fits: it is touched no more, and once bound it is gone and
	// its reuse time observed.
	v.filter(namesArgs(waiting, "a"), new(Scratch))
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
	if n := testutil.CollectAndCount(m.FreedIPReuse); n != 1 {
		t.Fatalf("reuse histogram has %d series", n)
	}
	if got := histogramCount(t, m.FreedIPReuse); got != 1 {
		t.Fatalf("reuse histogram observed %d binds, want 1", got)
	}

	// A node's capacity growing frees room too.
	l.SetPod(pod("held2", "a", 1))
	other := pod("p6", "", 1)
	v.filter(namesArgs(other, "a"), new(Scratch))
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

func touched(ts []extender.Touch) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}
