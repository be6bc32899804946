package schedplugin

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

func TestFit(t *testing.T) {
	valid := func(n int64) underlay.Capacity { return underlay.Capacity{IPs: n, Source: underlay.SourceAnnotation} }
	invalid := underlay.NodeCapacity(map[string]string{names.UnderlayIPCapacityAnnotation: "lots"}, nil, 10)
	tests := []struct {
		name       string
		need, used int64
		capacity   underlay.Capacity
		want       fwk.Code
		wantReason []string
	}{
		{name: "needs none", need: 0, used: 5, capacity: valid(0), want: fwk.Success},
		{name: "fits", need: 1, used: 2, capacity: valid(3), want: fwk.Success},
		{name: "fills the node exactly", need: 2, used: 1, capacity: valid(3), want: fwk.Success},
		{name: "full: preemption may help", need: 1, used: 3, capacity: valid(3), want: fwk.Unschedulable,
			wantReason: []string{"underlay IPs exhausted", "3/3 used", "pod needs 1"}},
		{name: "over-committed by someone else", need: 1, used: 5, capacity: valid(3), want: fwk.Unschedulable,
			wantReason: []string{"5/3 used"}},
		{name: "capacity 0: unresolvable", need: 1, capacity: valid(0), want: fwk.UnschedulableAndUnresolvable,
			wantReason: []string{"capacity too small", "node has 0", "pod needs 1"}},
		{name: "need above capacity: unresolvable", need: 4, used: 0, capacity: valid(3), want: fwk.UnschedulableAndUnresolvable,
			wantReason: []string{"node has 3, pod needs 4"}},
		{name: "invalid capacity: unresolvable, says why", need: 1, capacity: invalid, want: fwk.UnschedulableAndUnresolvable,
			wantReason: []string{"invalid " + names.UnderlayIPCapacityAnnotation + " annotation", "treating capacity as 0", "pod needs 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fit(tc.need, tc.capacity, tc.used)
			if got.code != tc.want {
				t.Fatalf("fit(%d, %+v, %d) = %v %q, want %v", tc.need, tc.capacity, tc.used, got.code, got.reason, tc.want)
			}
			for _, w := range tc.wantReason {
				if !strings.Contains(got.reason, w) {
					t.Errorf("reason %q does not contain %q", got.reason, w)
				}
			}
			if tc.want == fwk.Success && got.reason != "" {
				t.Errorf("a fit has a reason: %q", got.reason)
			}
		})
	}
}

func TestFreeIPs(t *testing.T) {
	c := underlay.Capacity{IPs: 10}
	for _, tc := range []struct{ used, want int64 }{{0, 10}, {4, 6}, {10, 0}, {12, 0}} {
		if got := freeIPs(c, tc.used); got != tc.want {
			t.Errorf("freeIPs(10, used %d) = %d, want %d", tc.used, got, tc.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name string
		free []int64
		want []int64
	}{
		{name: "most free wins by count, not fraction", free: []int64{5, 2}, want: []int64{100, 0}},
		{name: "ties share the top", free: []int64{7, 3, 7}, want: []int64{100, 0, 100}},
		{name: "one short of the most still loses", free: []int64{99, 100}, want: []int64{0, 100}},
		{name: "all zero", free: []int64{0, 0}, want: []int64{0, 0}},
		{name: "empty", free: nil, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scores := make(fwk.NodeScoreList, len(tc.free))
			for i, f := range tc.free {
				scores[i] = fwk.NodeScore{Name: string(rune('a' + i)), Score: f}
			}
			normalize(scores)
			for i := range scores {
				if scores[i].Score != tc.want[i] {
					t.Fatalf("normalize(%v) = %v, want %v", tc.free, scores, tc.want)
				}
			}
		})
	}
}

func TestUsedIPs(t *testing.T) {
	if got := usedIPs(nil); got != 0 {
		t.Errorf("usedIPs(nil) = %d", got)
	}
	r := fakeResource{scalar: map[v1.ResourceName]int64{underlay.Resource: 4, "example.com/gpu": 2}}
	if got := usedIPs(r); got != 4 {
		t.Errorf("usedIPs = %d, want 4", got)
	}
}

// fakeResource is the one method of fwk.Resource that usedIPs reads.
type fakeResource struct {
	fwk.Resource
	scalar map[v1.ResourceName]int64
}

func (r fakeResource) GetScalarResources() map[v1.ResourceName]int64 { return r.scalar }

func ipPod(name, node string, need int64) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}, Spec: v1.PodSpec{NodeName: node,
		Containers: []v1.Container{{Name: "app"}}}}
	if need > 0 {
		q := *resource.NewQuantity(need, resource.DecimalSI)
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: v1.ResourceList{underlay.Resource: q}, Limits: v1.ResourceList{underlay.Resource: q}}
	}
	return p
}

func capNode(name string, annotations, labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: labels}}
}

func annotated(v string) map[string]string {
	return map[string]string{names.UnderlayIPCapacityAnnotation: v}
}

// TestCapacityGrewWhenRead: a pod waiting on nodes the mirror has not read
// (capacity 0, "not read yet") is queued when the mirror's value or mark
// arrives.
func TestCapacityGrewWhenRead(t *testing.T) {
	rule := underlay.Rule{Default: 10, AwaitSource: true}
	unread := capNode("n", nil, nil)
	mirrored := capNode("n", map[string]string{names.UnderlayIPSourceCapacityAnnotation: "3"}, nil)
	marked := capNode("n", map[string]string{names.UnderlayIPSourceAnnotation: names.UnderlayIPSourceNone}, nil)
	if nodeAddedFits(1, unread, rule) {
		t.Error("an unread node added fits")
	}
	if !capacityGrew(1, unread, mirrored, rule) || !capacityGrew(1, unread, marked, rule) {
		t.Error("the mirror reading a node does not queue the pod")
	}
}
