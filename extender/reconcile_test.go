package extender

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

func staleUIDs(s []StaleReservation) []types.UID {
	out := []types.UID{}
	for _, r := range s {
		out = append(out, r.UID)
	}
	return out
}

// TestStale: confirmed reservations and those with an unknown outcome are
// listed, and only once the informer has left them unsettled for the grace
// since then or since the last read that kept them; in-flight ones never.
func TestStale(t *testing.T) {
	const grace = 5 * time.Second
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	l := NewLedger(LedgerOptions{DefaultCapacity: 10, Clock: clk})
	l.SetNode(node("a", ""))
	reserve := func(name string) uint64 {
		t.Helper()
		r := l.Reserve(types.UID("uid-"+name), "ns", name, "a", 1)
		if !r.Verdict.Fit {
			t.Fatalf("reserving %s: %+v", name, r)
		}
		return r.Token
	}
	reserve("inflight")
	l.Unconfirmed("uid-unknown", reserve("unknown"))
	l.Confirmed("uid-old", reserve("old"))
	clk.Step(time.Second)
	l.Confirmed("uid-young", reserve("young"))
	l.Confirmed("uid-settled", reserve("settled"))
	l.Confirmed("uid-ghost", 99) // no such reservation: nothing happens
	l.SetPod(pod("settled", "a", 1))

	if got := l.Stale(grace, 10); len(got) != 0 {
		t.Errorf("before the grace: %v, want none", staleUIDs(got))
	}
	clk.Step(grace - time.Second)
	want := []StaleReservation{
		{UID: "uid-old", Namespace: "ns", Name: "old", Node: "a", Token: 3},
		{UID: "uid-unknown", Namespace: "ns", Name: "unknown", Node: "a", Token: 2, Unconfirmed: true},
	}
	if got := l.Stale(grace, 10); !reflect.DeepEqual(got, want) {
		t.Errorf("at the grace of the first: %+v, want %+v", got, want)
	}
	clk.Step(time.Second)
	if got := staleUIDs(l.Stale(grace, 10)); !reflect.DeepEqual(got, []types.UID{"uid-old", "uid-unknown", "uid-young"}) {
		t.Errorf("past both graces: %v, want the confirmed and unknown ones, oldest first", got)
	}
	if got := staleUIDs(l.Stale(grace, 1)); !reflect.DeepEqual(got, []types.UID{"uid-old"}) {
		t.Errorf("limit 1: %v, want the oldest", got)
	}
	// A kept reservation waits another grace; the others go first.
	l.KeepStale(want[0])
	l.KeepStale(want[1])
	if got := staleUIDs(l.Stale(grace, 10)); !reflect.DeepEqual(got, []types.UID{"uid-young"}) {
		t.Errorf("after keeping old and unknown: %v, want young only", got)
	}
	clk.Step(grace)
	if got := staleUIDs(l.Stale(grace, 10)); !reflect.DeepEqual(got, []types.UID{"uid-young", "uid-old", "uid-unknown"}) {
		t.Errorf("a grace after keeping old: %v, want young, then old and unknown", got)
	}
	// Never listed: in flight, or settled by the informer.
	clk.Step(time.Hour)
	for _, got := range l.Stale(grace, 10) {
		if got.UID == "uid-inflight" || got.UID == "uid-settled" {
			t.Errorf("listed %s, which is not an unsettled reservation", got.UID)
		}
	}
}

// TestDropStaleToken: a verdict on a reservation replaced since it was
// listed leaves the new one alone.
func TestDropStaleToken(t *testing.T) {
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	l.SetNode(node("a", ""))
	first := l.Reserve("uid-p", "ns", "p", "a", 2)
	l.Confirmed("uid-p", first.Token)
	stale := StaleReservation{UID: "uid-p", Namespace: "ns", Name: "p", Node: "a", Token: first.Token}
	second := l.Reserve("uid-p", "ns", "p", "a", 2)
	if dropped, _ := l.DropStale(stale); dropped {
		t.Error("DropStale dropped a newer reservation")
	}
	if u := l.Usage("a"); u.Reserved != 2 {
		t.Errorf("reserved = %d, want the newer reservation's 2", u.Reserved)
	}
	stale.Token = second.Token
	if dropped, room := l.DropStale(stale); !dropped || room != 2 || l.Usage("a").Reserved != 0 {
		t.Errorf("DropStale with the current token: reserved %d, want 0", l.Usage("a").Reserved)
	}
}

func TestReconcileVerdict(t *testing.T) {
	s := StaleReservation{UID: "uid-p", Namespace: "ns", Name: "p", Node: "a", Token: 1}
	finished := func(phase v1.PodPhase) *v1.Pod {
		p := pod("p", "a", 1)
		p.Status.Phase = phase
		return p
	}
	recreated := pod("p", "a", 1)
	recreated.UID = "uid-new"
	terminating := pod("p", "a", 1)
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	tests := []struct {
		name        string
		unconfirmed bool
		pod         *v1.Pod
		err         error
		wantResult  string
		wantDrop    bool
	}{
		{name: "unknown outcome, pod deleted while pending", unconfirmed: true, err: apierrors.NewNotFound(v1.Resource("pods"), "p"), wantResult: reconcileGone, wantDrop: true},
		{name: "unknown outcome, still pending: the Binding may yet land", unconfirmed: true, pod: pod("p", "", 1), wantResult: reconcilePending},
		{name: "unknown outcome, landed", unconfirmed: true, pod: pod("p", "a", 1), wantResult: reconcileBound},
		{name: "unknown outcome, bound elsewhere", unconfirmed: true, pod: pod("p", "b", 1), wantResult: reconcileNotOnNode, wantDrop: true},
		{name: "deleted", err: apierrors.NewNotFound(v1.Resource("pods"), "p"), wantResult: reconcileGone, wantDrop: true},
		{name: "recreated with another UID", pod: recreated, wantResult: reconcileRecreated, wantDrop: true},
		{name: "succeeded", pod: finished(v1.PodSucceeded), wantResult: reconcileTerminal, wantDrop: true},
		{name: "failed", pod: finished(v1.PodFailed), wantResult: reconcileTerminal, wantDrop: true},
		{name: "on another node", pod: pod("p", "b", 1), wantResult: reconcileNotOnNode, wantDrop: true},
		{name: "not bound", pod: pod("p", "", 1), wantResult: reconcileNotOnNode, wantDrop: true},
		{name: "running on the node", pod: pod("p", "a", 1), wantResult: reconcileBound},
		{name: "pending on the node", pod: finished(v1.PodPending), wantResult: reconcileBound},
		{name: "terminating on the node: its IPs are still in use", pod: terminating, wantResult: reconcileBound},
		{name: "read failed", err: apierrors.NewServiceUnavailable("down"), wantResult: reconcileReadFailed},
		{name: "transport error", err: errors.New("connection refused"), wantResult: reconcileReadFailed},
		{name: "forbidden", err: apierrors.NewForbidden(v1.Resource("pods"), "p", errors.New("no")), wantResult: reconcileReadFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := s
			s.Unconfirmed = tc.unconfirmed
			result, drop := reconcileVerdict(s, tc.pod, tc.err)
			if result != tc.wantResult || drop != tc.wantDrop {
				t.Errorf("reconcileVerdict = %q, drop %v; want %q, drop %v", result, drop, tc.wantResult, tc.wantDrop)
			}
		})
	}
}

// TestReconcilerDropsGonePod is issue 31's leak: a pod bound by the binder
// and deleted before the informer ever showed it bound (its watch was down,
// and a relist produces no event for a pod it never cached). The reconciler
// finds it gone, frees its IPs and tells the waiting pods; a pod that still
// runs on its node keeps its reservation.
func TestReconcilerDropsGonePod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	waiting := NewWaiting(clk)
	l := NewLedger(LedgerOptions{DefaultCapacity: 10, Clock: clk})
	l.SetNode(node("a", "2"))
	cs := fake.NewClientset(runtime.Object(pod("gone", "", 1)), pod("runs", "", 1))
	api := &bindingAPI{}
	api.Install(cs)
	var gets int
	cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	// The informer shows nothing: bound pods it never delivered.
	empty := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	b := NewBinder(cs, IndexerLookup(empty), l)
	for _, name := range []string{"gone", "runs"} {
		l.RememberNeed(types.UID("uid-"+name), 1)
		if err := b.Bind(context.Background(), bindArgs(pod(name, "", 1), "a")).Err; err != nil {
			t.Fatalf("binding %s: %v", name, err)
		}
	}
	if err := cs.CoreV1().Pods("ns").Delete(context.Background(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waiting.Rejected("uid-w", "ns", "w", 0, 1)
	if got := l.Usage("a").Free(); got != 0 {
		t.Fatalf("free on a after two binds = %d, want 0", got)
	}

	m := NewMetrics(nil)
	r := NewReconciler(l, cs, ReconcilerOptions{Grace: 5 * time.Second, Metrics: m, Waiting: waiting})
	r.Reconcile(context.Background())
	if gets != 0 || l.Usage("a").Free() != 0 {
		t.Fatalf("within the grace: %d reads, free %d; want none and 0", gets, l.Usage("a").Free())
	}
	clk.Step(5 * time.Second)
	r.Reconcile(context.Background())
	if got := l.Usage("a"); got.Free() != 1 || got.Reserved != 1 {
		t.Errorf("after reconciling: free %d, reserved %d; want the deleted pod's IP free and the running pod's reserved", got.Free(), got.Reserved)
	}
	if got := testutil.ToFloat64(m.ReconciledReservations.WithLabelValues(reconcileGone)); got != 1 {
		t.Errorf("reservations_reconciled_total{result=gone} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.ReconciledReservations.WithLabelValues(reconcileBound)); got != 1 {
		t.Errorf("reservations_reconciled_total{result=bound} = %v, want 1", got)
	}
	if got := waiting.Next(); !reflect.DeepEqual(got, []Touch{{UID: "uid-w", Namespace: "ns", Name: "w"}}) {
		t.Errorf("waiting pods to touch = %+v, want w: the freed IP must reach it", got)
	}
	// The running pod is read again only after another grace.
	gets = 0
	r.Reconcile(context.Background())
	clk.Step(5 * time.Second)
	r.Reconcile(context.Background())
	if gets != 1 {
		t.Errorf("reads of the running pod over one grace = %d, want 1", gets)
	}
	// Once the informer shows it bound, it is never read again.
	l.SetPod(pod("runs", "a", 1))
	clk.Step(time.Minute)
	r.Reconcile(context.Background())
	if gets != 1 {
		t.Errorf("reads after the informer settled the pod = %d, want still 1", gets)
	}
}

// TestReconcilerBoundsReads: one round reads at most MaxGets pods, and a
// failed read keeps the reservation.
func TestReconcilerBoundsReads(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	l := NewLedger(LedgerOptions{DefaultCapacity: 10, Clock: clk})
	l.SetNode(node("a", ""))
	for _, name := range []string{"p0", "p1", "p2", "p3", "p4"} {
		l.Confirmed(types.UID("uid-"+name), l.Reserve(types.UID("uid-"+name), "ns", name, "a", 1).Token)
	}
	cs := fake.NewClientset()
	var gets int
	cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		return true, nil, apierrors.NewServiceUnavailable("apiserver away")
	})
	clk.Step(time.Minute)
	m := NewMetrics(nil)
	NewReconciler(l, cs, ReconcilerOptions{MaxGets: 3, Metrics: m}).Reconcile(context.Background())
	if gets != 3 {
		t.Errorf("reads in one round = %d, want MaxGets 3", gets)
	}
	if got := l.Usage("a").Reserved; got != 5 {
		t.Errorf("reserved after failed reads = %d, want all 5 kept", got)
	}
	if got := testutil.ToFloat64(m.ReconciledReservations.WithLabelValues(reconcileReadFailed)); got != 3 {
		t.Errorf("reservations_reconciled_total{result=error} = %v, want 3", got)
	}
}
