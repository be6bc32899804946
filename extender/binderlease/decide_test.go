package binderlease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func lease(holder, rv string, renew time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: Name, ResourceVersion: rv}}
	if holder != "" {
		l.Spec.HolderIdentity = &holder
	}
	t := metav1.NewMicroTime(renew)
	l.Spec.RenewTime = &t
	return l
}

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	other := lease("kube-scheduler", "7", t0)
	seen := Observed{Record: recordOf(other), Since: t0}
	tests := []struct {
		name       string
		cur        *coordinationv1.Lease
		prev       Observed
		now        time.Time
		want       Action
		wantHolder string
	}{
		{name: "no lease", now: t0, want: Create},
		{name: "ours", cur: lease("capscale-scheduler", "7", t0), now: t0, want: Renew},
		{name: "empty holder", cur: lease("", "7", t0), now: t0, want: TakeOver},
		{name: "another's, first seen", cur: other, now: t0, want: Wait, wantHolder: "kube-scheduler"},
		{name: "another's, unchanged for less than the duration", cur: other, prev: seen, now: t0.Add(Duration - time.Millisecond), want: Wait, wantHolder: "kube-scheduler"},
		{name: "another's, unchanged for the duration", cur: other, prev: seen, now: t0.Add(Duration), want: TakeOver},
		// Expiry is judged on the local clock: a renewTime far in the past
		// (another machine's clock) does not make a live lease look dead.
		{name: "another's, renewed since", cur: lease("kube-scheduler", "8", t0.Add(-time.Hour)), prev: seen, now: t0.Add(Duration), want: Wait, wantHolder: "kube-scheduler"},
		{name: "another's, same resourceVersion, new renewTime", cur: lease("kube-scheduler", "7", t0.Add(time.Second)), prev: seen, now: t0.Add(Duration), want: Wait, wantHolder: "kube-scheduler"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.cur, "capscale-scheduler", tc.prev, tc.now, Duration)
			if d.Action != tc.want || d.Holder != tc.wantHolder {
				t.Fatalf("Decide = %+v, want action %v holder %q", d, tc.want, tc.wantHolder)
			}
		})
	}
}

func TestApply(t *testing.T) {
	now := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	l := Apply(nil, "capscale-system", "a", Decision{Action: Create}, now, Duration)
	if l.Namespace != "capscale-system" || l.Name != Name || *l.Spec.HolderIdentity != "a" || *l.Spec.LeaseDurationSeconds != 15 || l.Spec.LeaseTransitions != nil {
		t.Fatalf("created %+v", l.Spec)
	}
	taken := Apply(lease("b", "3", now), "capscale-system", "a", Decision{Action: TakeOver}, now.Add(time.Minute), Duration)
	if *taken.Spec.HolderIdentity != "a" || *taken.Spec.LeaseTransitions != 1 || !taken.Spec.AcquireTime.Time.Equal(now.Add(time.Minute)) {
		t.Fatalf("taken over %+v", taken.Spec)
	}
	renewed := Apply(taken, "capscale-system", "a", Decision{Action: Renew}, now.Add(2*time.Minute), Duration)
	if *renewed.Spec.LeaseTransitions != 1 || !renewed.Spec.AcquireTime.Time.Equal(now.Add(time.Minute)) || !renewed.Spec.RenewTime.Time.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("renewed %+v", renewed.Spec)
	}
}
