package publisher

import (
	"testing"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestDecideCharged: native mode publishes the capacity less what the
// IPAM reports in use beyond the pods, so that kube-scheduler, which counts
// only the pods' requests, cannot place into IPs the IPAM still holds;
// never below what the pods hold.
func TestDecideCharged(t *testing.T) {
	const (
		c = names.UnderlayIPCapacityAnnotation
		u = names.UnderlayIPSourceUsedAnnotation
	)
	tests := []struct {
		name                  string
		annotations           map[string]string
		inUse, unlisted, want int64
	}{
		{name: "nothing beyond the pods", annotations: map[string]string{c: "10"}, inUse: 9, want: 10},
		{name: "the IPAM still holds one", annotations: map[string]string{c: "10", u: "10"}, inUse: 9, want: 9},
		{name: "the IPAM released it", annotations: map[string]string{c: "10", u: "9"}, inUse: 9, want: 10},
		{name: "the IPAM behind the pods", annotations: map[string]string{c: "10", u: "3"}, inUse: 5, want: 10},
		{name: "never below what the pods hold", annotations: map[string]string{c: "10", u: "10"}, inUse: 2, want: 2},
		{name: "never above the capacity", annotations: map[string]string{c: "4", u: "7"}, inUse: 6, want: 4},
		// Issue 55 §3: 14 IPs; the IPAM lists 13 (12 pods and a
		// force-deleted pod's IP); the replacement is bound before its CNI
		// ADD (13 requested, 1 with no IP). The larger of the two counts
		// published 14 and let kube-scheduler bind one more.
		{name: "a pod with no IP yet is beside the IPAM's list", annotations: map[string]string{c: "14", u: "13"}, inUse: 13, unlisted: 1, want: 13},
		{name: "the pods with no IP yet, the IPAM behind them", annotations: map[string]string{c: "10", u: "3"}, inUse: 5, unlisted: 2, want: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(node(tc.annotations, "", ""), underlay.Rule{Default: 10}, Use{InUse: tc.inUse, Unlisted: tc.unlisted})
			if d.Want != tc.want || !d.Patch {
				t.Fatalf("DecideCharged = %+v, want %d published", d, tc.want)
			}
		})
	}
}
