package ipreport

import (
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

func node(name string, annotations, labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: labels}}
}

func pod(name, node string, phase v1.PodPhase, ips int64) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: v1.PodSpec{NodeName: node}, Status: v1.PodStatus{Phase: phase}}
	c := v1.Container{Name: "c"}
	if ips > 0 {
		c.Resources.Requests = v1.ResourceList{underlay.Resource: *resource.NewQuantity(ips, resource.DecimalSI)}
	}
	p.Spec.Containers = []v1.Container{c}
	return p
}

func capacityOf(v string) map[string]string {
	return map[string]string{names.UnderlayIPCapacityAnnotation: v}
}

// mixed is the cluster the e2e test builds too: capacities 0, 3 and the
// default, one invalid annotation, one from a label, one published.
func mixed() ([]*v1.Node, []*v1.Pod) {
	published := node("e-published", capacityOf("3"), nil)
	published.Status.Allocatable = v1.ResourceList{underlay.Resource: resource.MustParse("3")}
	nodes := []*v1.Node{
		node("a-zero", capacityOf("0"), nil),
		node("b-three", capacityOf("3"), nil),
		node("c-default", nil, nil),
		node("d-invalid", capacityOf("lots"), nil),
		published,
		node("f-label", nil, map[string]string{names.UnderlayIPCapacityLabel: "4"}),
	}
	nominated := pod("nominated", "", v1.PodPending, 2)
	nominated.Status.NominatedNodeName = "b-three"
	pods := []*v1.Pod{
		pod("b1", "b-three", v1.PodRunning, 2),
		pod("b2", "b-three", v1.PodPending, 1), // bound, not yet running: holds
		pod("c1", "c-default", v1.PodRunning, 4),
		pod("c-done", "c-default", v1.PodSucceeded, 5),
		pod("c-failed", "c-default", v1.PodFailed, 5),
		pod("c-plain", "c-default", v1.PodRunning, 0),
		pod("waiting", "", v1.PodPending, 1),
		nominated,
		pod("orphan", "gone", v1.PodRunning, 1),
	}
	return nodes, pods
}

func TestBuild(t *testing.T) {
	nodes, pods := mixed()
	rep := Build(nodes, pods, 10, AllNodes)
	type row struct {
		name           string
		capacity, used int64
		free           int64
		source         string
		invalid        bool
		holders        int
		waiting        int
	}
	var got []row
	for _, n := range rep.Nodes {
		got = append(got, row{n.Name, n.Capacity, n.Used, n.Free, n.Source, n.Invalid != "", len(n.Holders), len(n.Waiting)})
	}
	want := []row{
		{"a-zero", 0, 0, 0, "annotation", false, 0, 0},
		{"b-three", 3, 3, 0, "annotation", false, 2, 1},
		{"c-default", 10, 4, 6, "default", false, 1, 0},
		{"d-invalid", 0, 0, 0, "annotation", true, 0, 0},
		{"e-published", 3, 0, 3, "annotation", false, 0, 0},
		{"f-label", 4, 0, 4, "label", false, 0, 0},
		{"gone", 0, 1, 0, SourceNoNode, false, 1, 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("nodes:\n got %+v\nwant %+v", got, want)
	}
	if p := rep.Nodes[4].Published; p == nil || *p != 3 {
		t.Errorf("published capacity %v, want 3", p)
	}
	if rep.Nodes[0].Published != nil {
		t.Errorf("a node without the resource in allocatable reads as published")
	}
	wantTotals := Totals{Nodes: 7, Capacity: 20, Used: 8, Free: 13, Full: 4, Invalid: 1, Waiting: 2}
	if rep.Totals != wantTotals {
		t.Errorf("totals %+v, want %+v", rep.Totals, wantTotals)
	}
	if w := rep.Waiting; len(w) != 2 || w[0].Name != "nominated" || w[1].Name != "waiting" {
		t.Errorf("waiting %+v, want nominated and waiting, sorted", w)
	}
	if h := rep.Nodes[1].Holders; h[0].Name != "b1" || h[0].IPs != 2 || h[1].Name != "b2" {
		t.Errorf("holders of b-three %+v", h)
	}
}

// TestBuildSelectedNodes: over the nodes a label selector matched, pods
// bound to other nodes, existing or gone, count nowhere: no no-node row,
// nothing added to the totals (kubectl capscale ips -l).
func TestBuildSelectedNodes(t *testing.T) {
	nodes, pods := mixed()
	rep := Build([]*v1.Node{nodes[1], nodes[5]}, pods, 10, SelectedNodes)
	var got []string
	for _, n := range rep.Nodes {
		got = append(got, n.Name)
	}
	if strings.Join(got, ",") != "b-three,f-label" {
		t.Fatalf("nodes %v, want b-three and f-label only", got)
	}
	wantTotals := Totals{Nodes: 2, Capacity: 7, Used: 3, Free: 4, Full: 1, Waiting: 2}
	if rep.Totals != wantTotals {
		t.Errorf("totals %+v, want %+v", rep.Totals, wantTotals)
	}
	if n := rep.Nodes[0]; len(n.Holders) != 2 || len(n.Waiting) != 1 {
		t.Errorf("b-three holds %+v and has waiting %+v, want b1, b2 and the nominated pod", n.Holders, n.Waiting)
	}
}

func TestFilter(t *testing.T) {
	nodes, pods := mixed()
	rep := Build(nodes, pods, 10, AllNodes)
	namesOf := func(r Report) string {
		var out []string
		for _, n := range r.Nodes {
			out = append(out, n.Name)
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		name string
		f    Filter
		want string
	}{
		{"all", Filter{}, "a-zero,b-three,c-default,d-invalid,e-published,f-label,gone"},
		{"full", Filter{Full: true}, "a-zero,b-three,d-invalid,gone"},
		{"min free", Filter{MinFree: 4}, "c-default,f-label"},
		{"invalid", Filter{Invalid: true}, "d-invalid"},
		{"names", Filter{Names: []string{"f-label", "b-three"}}, "b-three,f-label"},
		{"most free first", Filter{MinFree: 1, SortBy: SortFree}, "c-default,f-label,e-published"},
		{"most used first, ties by name", Filter{SortBy: SortUsed}, "c-default,b-three,gone,a-zero,d-invalid,e-published,f-label"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.f.Apply(rep)
			if err != nil {
				t.Fatal(err)
			}
			if namesOf(got) != tc.want {
				t.Errorf("nodes %s, want %s", namesOf(got), tc.want)
			}
			if got.Totals.Nodes != len(got.Nodes) || got.Totals.Waiting != 2 {
				t.Errorf("totals %+v: want them over the kept nodes, waiting the cluster's", got.Totals)
			}
		})
	}
	for _, f := range []Filter{{MinFree: -1}, {Full: true, MinFree: 2}, {SortBy: "age"}, {Names: []string{"b-three", "nope"}}} {
		if _, err := f.Apply(rep); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
}

// TestWithUncounted: only a bound, unfinished, non-hostNetwork pod of a
// marked namespace that needs no underlay IP holds one nobody counts; a
// filter keeps those on the nodes it shows.
func TestWithUncounted(t *testing.T) {
	nodes := []*v1.Node{node("a", nil, nil), node("b", nil, nil)}
	inNS := func(p *v1.Pod, ns string) *v1.Pod { p.Namespace = ns; return p }
	hostNet := inNS(pod("host-net", "a", v1.PodRunning, 0), "shop")
	// Asks for 0 itself, as the admission policy lets it: not uncounted.
	zero := inNS(pod("zero", "a", v1.PodRunning, 0), "shop")
	zero.Spec.Containers[0].Resources.Limits = v1.ResourceList{underlay.Resource: resource.MustParse("0")}
	hostNet.Spec.HostNetwork = true
	pods := []*v1.Pod{
		inNS(pod("old", "a", v1.PodRunning, 0), "shop"),
		inNS(pod("old-2", "b", v1.PodPending, 0), "shop"), // bound, starting: holds
		inNS(pod("counted", "a", v1.PodRunning, 1), "shop"),
		zero,
		hostNet,
		inNS(pod("unbound", "", v1.PodPending, 0), "shop"),
		inNS(pod("done", "a", v1.PodSucceeded, 0), "shop"),
		inNS(pod("elsewhere", "a", v1.PodRunning, 0), "plain"),
		inNS(pod("on-a-gone-node", "gone", v1.PodRunning, 0), "shop"),
	}
	rep := WithUncounted(Build(nodes, pods, 10, AllNodes), pods, map[string]bool{"shop": true})
	want := []UncountedPod{{Namespace: "shop", Name: "old", Node: "a"}, {Namespace: "shop", Name: "old-2", Node: "b"}}
	if !reflect.DeepEqual(rep.Uncounted, want) {
		t.Errorf("uncounted %+v, want %+v", rep.Uncounted, want)
	}
	if rep.Nodes[0].Uncounted != 1 || rep.Nodes[1].Uncounted != 1 {
		t.Errorf("per node: %+v", rep.Nodes)
	}
	f, err := Filter{Names: []string{"b"}}.Apply(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Uncounted, want[1:]) {
		t.Errorf("filtered to b: %+v, want %+v", f.Uncounted, want[1:])
	}
	if rep := WithUncounted(Build(nodes, pods, 10, AllNodes), pods, nil); rep.Uncounted != nil {
		t.Errorf("no marked namespace: %+v", rep.Uncounted)
	}
}

func TestMaxCapacity(t *testing.T) {
	const m = names.UnderlayIPSourceMaxCapacityAnnotation
	for _, tc := range []struct {
		ann     map[string]string
		want    int64
		known   bool
		invalid string
	}{
		{ann: nil},
		{ann: map[string]string{m: "29"}, want: 29, known: true},
		{ann: map[string]string{m: "invalid: maxCapacity expression: x"}, invalid: "maxCapacity expression: x"},
		{ann: map[string]string{m: "-1"}, invalid: `not a count: "-1"`},
		{ann: map[string]string{m: "lots"}, invalid: `not a count: "lots"`},
	} {
		n, invalid := MaxCapacity(tc.ann)
		if (n != nil) != tc.known || (n != nil && *n != tc.want) || invalid != tc.invalid {
			t.Errorf("MaxCapacity(%v) = %v, %q; want %d (known %v), %q", tc.ann, n, invalid, tc.want, tc.known, tc.invalid)
		}
	}
}
