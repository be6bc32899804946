package publisher

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestDecideDrawsAll (issue 49 §2): kube-scheduler counts only requests,
// so a draws-all node publishes its capacity less what its pod-network
// pods that request nothing take, never below what is requested (the
// kubelet re-admits running pods against it); a node the mirror has not
// read publishes what is requested.
func TestDecideDrawsAll(t *testing.T) {
	n := func(a map[string]string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: a}}
	}
	all := map[string]string{names.UnderlayIPSourceCapacityAnnotation: "5", names.UnderlayIPDrawsAnnotation: underlay.DrawsAll}
	marked := map[string]string{names.UnderlayIPSourceCapacityAnnotation: "5", names.UnderlayIPDrawsAnnotation: underlay.DrawsMarked}
	with := func(a map[string]string, used string) map[string]string {
		b := map[string]string{names.UnderlayIPSourceUsedAnnotation: used}
		for k, v := range a {
			b[k] = v
		}
		return b
	}
	tests := []struct {
		name         string
		node         *v1.Node
		rule         underlay.Rule
		inUse, drawn int64
		want         int64
		invalid      bool
	}{
		{name: "draws all", node: n(all), inUse: 1, drawn: 2, want: 3},
		{name: "draws all, none unasked", node: n(all), inUse: 1, want: 5},
		{name: "draws all, over", node: n(all), inUse: 3, drawn: 4, want: 3},
		{name: "draws marked", node: n(marked), inUse: 1, drawn: 2, want: 5},
		{name: "not read yet", node: n(nil), rule: underlay.Rule{Default: 10, AwaitSource: true}, inUse: 1, want: 1, invalid: true},
		// The IPAM's report beyond the pods' charges (requests and drawn)
		// is withheld too; below them it withholds nothing more.
		{name: "draws all, the IPAM reports more", node: n(with(all, "4")), inUse: 1, drawn: 2, want: 2},
		{name: "draws all, the IPAM reports less", node: n(with(all, "2")), inUse: 1, drawn: 2, want: 3},
		{name: "draws marked, the IPAM reports more", node: n(with(marked, "4")), inUse: 1, drawn: 2, want: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rule == (underlay.Rule{}) {
				tc.rule = underlay.Rule{Default: 10}
			}
			d := Decide(tc.node, tc.rule, Use{InUse: tc.inUse, Drawn: tc.drawn})
			if d.Want != tc.want || (d.Invalid != "") != tc.invalid || !d.Patch {
				t.Fatalf("Decide = %+v, want %d (invalid %v)", d, tc.want, tc.invalid)
			}
		})
	}
}

// TestDecideUnreadWritesNothingNew: a fresh install's unread node, which
// advertises nothing, is not written 0 (it counts 0 already), so that the
// publisher's first pass does not double the mirror's Node writes; a node
// that holds IPs, or advertised a capacity before, is.
func TestDecideUnreadWritesNothingNew(t *testing.T) {
	await := underlay.Rule{Default: 10, AwaitSource: true}
	bare := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	if d := Decide(bare, await, Use{}); d.Patch || d.Invalid == "" {
		t.Errorf("unread bare node: %+v, want no patch, invalid", d)
	}
	if d := Decide(bare, await, Use{InUse: 2}); !d.Patch || d.Want != 2 {
		t.Errorf("unread node holding 2: %+v, want 2 published", d)
	}
	was := node(map[string]string{PublishedAnnotation: "10"}, "10", "10")
	if d := Decide(was, await, Use{}); !d.Patch || d.Want != 0 {
		t.Errorf("unread node that advertised 10: %+v, want 0 published", d)
	}
	if d := Decide(bare, underlay.Rule{Default: 0}, Use{}); !d.Patch || d.Want != 0 {
		t.Errorf("read node of capacity 0: %+v, want 0 published", d)
	}
}
