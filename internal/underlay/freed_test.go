package underlay

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/internal/names"
)

// TestIPAMReport: the used annotation is read beside every capacity
// source; an invalid one makes the node invalid, never "nothing in use".
func TestIPAMReport(t *testing.T) {
	const used = names.UnderlayIPSourceUsedAnnotation
	tests := []struct {
		name        string
		annotations map[string]string
		want        IPAMReport
		wantIPs     int64
		wantInvalid string
	}{
		{name: "none", annotations: map[string]string{}, wantIPs: 10},
		{name: "reported", annotations: map[string]string{used: "7"}, want: IPAMReport{Used: 7, Reported: true}, wantIPs: 10},
		{name: "beside an override", annotations: map[string]string{names.UnderlayIPCapacityAnnotation: "4", used: "3"},
			want: IPAMReport{Used: 3, Reported: true}, wantIPs: 4},
		{name: "invalid from the mirror", annotations: map[string]string{used: InvalidPrefix + "used expression: no such key: status"},
			wantInvalid: "no such key: status"},
		{name: "garbage", annotations: map[string]string{used: "many"}, wantInvalid: "not an integer"},
		{name: "capacity already invalid keeps its reason", annotations: map[string]string{names.UnderlayIPCapacityAnnotation: "x", used: "2"},
			wantInvalid: names.UnderlayIPCapacityAnnotation},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NodeCapacity(tc.annotations, nil, 10)
			if tc.wantInvalid != "" {
				if !strings.Contains(c.Invalid, tc.wantInvalid) || c.IPs != 0 {
					t.Fatalf("NodeCapacity = %+v, want 0 and invalid containing %q", c, tc.wantInvalid)
				}
				return
			}
			if c.Invalid != "" || c.IPAM != tc.want || c.IPs != tc.wantIPs {
				t.Fatalf("NodeCapacity = %+v, want IPs %d and IPAM %+v", c, tc.wantIPs, tc.want)
			}
		})
	}
}

// TestFree is the one rule for free IPs: capacity less the union of what
// the pods hold and what the IPAM reports (Charged), or less the pods' and
// the holds' without a report.
func TestFree(t *testing.T) {
	reported := func(used int64) IPAMReport { return IPAMReport{Used: used, Reported: true} }
	tests := []struct {
		name string
		c    Capacity
		ch   Charges
		want int64
	}{
		{name: "no report, no hold", c: Capacity{IPs: 10}, ch: Charges{Pods: 9}, want: 1},
		{name: "no report, a force-deleted pod held", c: Capacity{IPs: 10}, ch: Charges{Pods: 9, Held: 1}, want: 0},
		{name: "no report, unlisted pods count once", c: Capacity{IPs: 10}, ch: Charges{Pods: 9, Unlisted: 3}, want: 1},
		{name: "IPAM still holds the deleted pod's IP", c: Capacity{IPs: 10, IPAM: reported(10)}, ch: Charges{Pods: 9}, want: 0},
		{name: "IPAM released it", c: Capacity{IPs: 10, IPAM: reported(9)}, ch: Charges{Pods: 9}, want: 1},
		{name: "pods ahead of the IPAM (just bound)", c: Capacity{IPs: 10, IPAM: reported(5)}, ch: Charges{Pods: 8, Unlisted: 3}, want: 2},
		{name: "a report lagging the pods never loosens the count", c: Capacity{IPs: 10, IPAM: reported(5)}, ch: Charges{Pods: 8}, want: 2},
		// The mirror may have written the report before the force delete:
		// it cannot show the IP the pod's sandbox still holds.
		{name: "a hold stays beside a report", c: Capacity{IPs: 10, IPAM: reported(9)}, ch: Charges{Pods: 9, Held: 1}, want: 0},
		// Issue 55 §3: a whereabouts /28 slice of 14; 12 pods run and hold
		// their IPs. A is force-deleted and its IP stays in the IPPool
		// (used 13); its replacement B is bound before its CNI ADD. The
		// larger count (pods 13, used 13) left one free, and C's bind made
		// B's or C's sandbox fail: "Could not allocate IP".
		{name: "issue 55: force delete, replacement before its ADD", c: Capacity{IPs: 14, IPAM: reported(13)},
			ch: Charges{Pods: 13, Unlisted: 1, Held: 1}, want: 0},
		{name: "issue 55: the hold over, the IPAM still lists A", c: Capacity{IPs: 14, IPAM: reported(13)},
			ch: Charges{Pods: 13, Unlisted: 1}, want: 0},
		{name: "issue 55: A's IP back, B's ADD done", c: Capacity{IPs: 14, IPAM: reported(13)},
			ch: Charges{Pods: 13}, want: 1},
		{name: "never negative", c: Capacity{IPs: 10, IPAM: reported(12)}, ch: Charges{Pods: 3}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Free(tc.c, tc.ch); got != tc.want {
				t.Fatalf("Free(%+v, %+v) = %d, want %d", tc.c, tc.ch, got, tc.want)
			}
		})
	}
}

// TestListed: a pod is in its IPAM's list once its node wrote its IPs.
func TestListed(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want bool
	}{
		{name: "nil", want: false},
		{name: "bound, no IP yet", pod: &v1.Pod{Spec: v1.PodSpec{NodeName: "n"}}, want: false},
		{name: "podIPs", pod: &v1.Pod{Status: v1.PodStatus{PodIPs: []v1.PodIP{{IP: "10.0.0.2"}}}}, want: true},
		{name: "podIP only", pod: &v1.Pod{Status: v1.PodStatus{PodIP: "10.0.0.2"}}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Listed(tc.pod); got != tc.want {
				t.Fatalf("Listed = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHoldAfterDelete: a force-deleted pod that held IPs is held for the
// kubelet's kill and teardown; a graceful deletion the kubelet finished,
// and a pod that finished, are not.
func TestHoldAfterDelete(t *testing.T) {
	forced := Deleted{Need: 1, NodeName: "n", Phase: v1.PodRunning, DeletionGrace: ptr.To[int64](0), SpecGrace: ptr.To[int64](30)}
	with := func(f func(*Deleted)) Deleted { d := forced; f(&d); return d }
	tests := []struct {
		name string
		d    Deleted
		want time.Duration
	}{
		{name: "force delete", d: forced, want: MinKillGrace + TeardownAllowance},
		{name: "force delete while pending on its node", d: with(func(d *Deleted) { d.Phase = v1.PodPending }), want: MinKillGrace + TeardownAllowance},
		{name: "graceful delete the kubelet finished (filtered watch: previous object)",
			d: with(func(d *Deleted) { d.DeletionGrace = ptr.To[int64](30) }), want: 0},
		{name: "graceful delete, terminal object", d: with(func(d *Deleted) { d.Phase = v1.PodSucceeded }), want: 0},
		{name: "finished on its own", d: with(func(d *Deleted) { d.DeletionGrace = nil }), want: 0},
		{name: "needs no IP", d: with(func(d *Deleted) { d.Need = 0 }), want: 0},
		{name: "never bound", d: with(func(d *Deleted) { d.NodeName = "" }), want: 0},
		{name: "tombstone, terminating with 10 s", d: with(func(d *Deleted) { d.Tombstone, d.DeletionGrace = true, ptr.To[int64](10) }),
			want: 10*time.Second + TeardownAllowance},
		{name: "tombstone, not deleting: the spec's grace", d: with(func(d *Deleted) { d.Tombstone, d.DeletionGrace = true, nil }),
			want: 30*time.Second + TeardownAllowance},
		{name: "tombstone, no grace anywhere: the API default", d: with(func(d *Deleted) { d.Tombstone, d.DeletionGrace, d.SpecGrace = true, nil, nil }),
			want: DefaultTerminationGrace + TeardownAllowance},
		{name: "tombstone, grace 1: the container minimum", d: with(func(d *Deleted) { d.Tombstone, d.DeletionGrace = true, ptr.To[int64](1) }),
			want: MinKillGrace + TeardownAllowance},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := HoldAfterDelete(tc.d); got != tc.want {
				t.Fatalf("HoldAfterDelete(%+v) = %v, want %v", tc.d, got, tc.want)
			}
		})
	}
}
