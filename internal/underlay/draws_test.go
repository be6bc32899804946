package underlay

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/capscale/capscale/internal/names"
)

// TestRuleAwaitSource: with capacity sources configured, a node the mirror
// has not read counts 0 with the reason, never the label or the default;
// the mirror's value or its "none" mark, or the per-node override, end the
// wait. Without the setting nothing changes.
func TestRuleAwaitSource(t *testing.T) {
	const (
		key    = names.UnderlayIPCapacityAnnotation
		mirror = names.UnderlayIPSourceCapacityAnnotation
		origin = names.UnderlayIPSourceAnnotation
	)
	tests := []struct {
		name        string
		await       bool
		annotations map[string]string
		labels      map[string]string
		want        Capacity
	}{
		{name: "no sources, nothing set", want: Capacity{IPs: 7, Source: SourceDefault}},
		{name: "no sources, label", labels: map[string]string{key: "4"}, want: Capacity{IPs: 4, Source: SourceLabel}},
		{name: "unread", await: true, want: Capacity{Source: SourceIPAM, Invalid: NotReadYet, Unread: true}},
		{name: "unread with a label", await: true, labels: map[string]string{key: "4"}, want: Capacity{Source: SourceIPAM, Invalid: NotReadYet, Unread: true}},
		{name: "unread with a hand-written origin", await: true, annotations: map[string]string{origin: "cilium x"}, want: Capacity{Source: SourceIPAM, Invalid: NotReadYet, Unread: true}},
		{name: "read, no source covers it", await: true, annotations: map[string]string{origin: names.UnderlayIPSourceNone}, labels: map[string]string{key: "4"}, want: Capacity{IPs: 4, Source: SourceLabel}},
		{name: "read, no source, default", await: true, annotations: map[string]string{origin: names.UnderlayIPSourceNone}, want: Capacity{IPs: 7, Source: SourceDefault}},
		{name: "read, mirrored", await: true, annotations: map[string]string{mirror: "3", origin: "own x"}, want: Capacity{IPs: 3, Source: SourceIPAM, Origin: "own x"}},
		{name: "override needs no mirror", await: true, annotations: map[string]string{key: "2"}, want: Capacity{IPs: 2, Source: SourceAnnotation}},
		{name: "unread keeps draws", await: true, annotations: map[string]string{names.UnderlayIPDrawsAnnotation: DrawsAll}, want: Capacity{Source: SourceIPAM, Invalid: NotReadYet, Unread: true, DrawsAll: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Rule{Default: 7, AwaitSource: tc.await}.Capacity(tc.annotations, tc.labels)
			if got != tc.want {
				t.Fatalf("Capacity = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDraws: the draws annotation rides along every level of the rule;
// a value other than all or marked is capacity 0 with its reason.
func TestDraws(t *testing.T) {
	d := names.UnderlayIPDrawsAnnotation
	tests := []struct {
		name        string
		annotations map[string]string
		want        Capacity
		reason      string
	}{
		{name: "absent", annotations: map[string]string{names.UnderlayIPSourceCapacityAnnotation: "5"}, want: Capacity{IPs: 5, Source: SourceIPAM}},
		{name: "marked", annotations: map[string]string{names.UnderlayIPSourceCapacityAnnotation: "5", d: DrawsMarked}, want: Capacity{IPs: 5, Source: SourceIPAM}},
		{name: "all", annotations: map[string]string{names.UnderlayIPSourceCapacityAnnotation: "5", d: DrawsAll}, want: Capacity{IPs: 5, Source: SourceIPAM, DrawsAll: true}},
		{name: "all under the override", annotations: map[string]string{names.UnderlayIPCapacityAnnotation: "2", names.UnderlayIPSourceCapacityAnnotation: "5", d: DrawsAll}, want: Capacity{IPs: 2, Source: SourceAnnotation, DrawsAll: true}},
		{name: "invalid", annotations: map[string]string{names.UnderlayIPSourceCapacityAnnotation: "5", d: "some"}, want: Capacity{Source: SourceIPAM}, reason: `invalid capscale.io/underlay-ip-draws annotation "some"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := NodeCapacity(tc.annotations, nil, 10)
			if got.IPs != tc.want.IPs || got.Source != tc.want.Source || got.DrawsAll != tc.want.DrawsAll || (got.Invalid != "") != (tc.reason != "") {
				t.Fatalf("NodeCapacity = %+v, want %+v", got, tc.want)
			}
			if !strings.Contains(got.Invalid, tc.reason) {
				t.Errorf("reason %q does not contain %q", got.Invalid, tc.reason)
			}
		})
	}
}

func TestCharge(t *testing.T) {
	rn := v1.ResourceName(names.UnderlayIPResource)
	asks := func(n int64) v1.PodSpec {
		return v1.PodSpec{Containers: []v1.Container{{Resources: v1.ResourceRequirements{Limits: v1.ResourceList{rn: *resource.NewQuantity(n, resource.DecimalSI)}}}}}
	}
	host := asks(0)
	host.HostNetwork = true
	tests := []struct {
		name               string
		spec               v1.PodSpec
		marked, all, drawn int64
	}{
		{name: "unmarked", spec: v1.PodSpec{Containers: []v1.Container{{}}}, marked: 0, all: 1, drawn: 1},
		{name: "asks for 0", spec: asks(0), marked: 0, all: 1, drawn: 1},
		{name: "asks for 1", spec: asks(1), marked: 1, all: 1, drawn: 0},
		{name: "asks for 3", spec: asks(3), marked: 3, all: 3, drawn: 0},
		{name: "hostNetwork", spec: host, marked: 0, all: 0, drawn: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{Spec: tc.spec}
			if got := PodCharge(p, Capacity{}); got != tc.marked {
				t.Errorf("charge on a marked node = %d, want %d", got, tc.marked)
			}
			if got := PodCharge(p, Capacity{DrawsAll: true}); got != tc.all {
				t.Errorf("charge on a draws-all node = %d, want %d", got, tc.all)
			}
			if got := Drawn(PodNeed(p), PodNetwork(p)); got != tc.drawn {
				t.Errorf("Drawn = %d, want %d", got, tc.drawn)
			}
		})
	}
}
