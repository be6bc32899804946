package publisher

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

func node(annotations map[string]string, capacity, allocatable string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: annotations},
		Status: v1.NodeStatus{Capacity: v1.ResourceList{}, Allocatable: v1.ResourceList{}}}
	if capacity != "" {
		n.Status.Capacity[underlay.Resource] = resource.MustParse(capacity)
	}
	if allocatable != "" {
		n.Status.Allocatable[underlay.Resource] = resource.MustParse(allocatable)
	}
	return n
}

func labelled(n *v1.Node, capacity string) *v1.Node {
	n.Labels = map[string]string{names.UnderlayIPCapacityLabel: capacity}
	return n
}

func TestDecide(t *testing.T) {
	ann := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	const capA, pub = names.UnderlayIPCapacityAnnotation, PublishedAnnotation
	tests := []struct {
		name        string
		node        *v1.Node
		inUse       int64
		wantPatch   bool
		wantValue   int64
		wantInvalid bool
		wantForeign bool
	}{
		{name: "new node, default", node: node(nil, "", ""), wantPatch: true, wantValue: 10},
		{name: "new node, annotated", node: node(ann(capA, "3"), "", ""), wantPatch: true, wantValue: 3},
		{name: "new node, labelled", node: labelled(node(nil, "", ""), "4"), wantPatch: true, wantValue: 4},
		{name: "re-created node keeps its label's capacity", node: labelled(node(ann(pub, "4"), "4", "4"), "4"), wantValue: 4},
		{name: "annotation overrides label", node: labelled(node(ann(capA, "2"), "", ""), "4"), wantPatch: true, wantValue: 2},
		{name: "published and current", node: node(ann(capA, "3", pub, "3"), "3", "3"), wantValue: 3},
		{name: "annotation raised", node: node(ann(capA, "5", pub, "3"), "3", "3"), wantPatch: true, wantValue: 5},
		{name: "annotation removed: back to default", node: node(ann(pub, "3"), "3", "3"), wantPatch: true, wantValue: 10},
		{name: "valid lowering below what is in use still lowers", node: node(ann(capA, "2", pub, "5"), "5", "5"), inUse: 3, wantPatch: true, wantValue: 2},
		{name: "invalid annotation, nothing in use: 0", node: node(ann(capA, "lots"), "", ""), wantPatch: true, wantValue: 0, wantInvalid: true},
		{name: "invalid annotation, 3 in use: 3", node: node(ann(capA, "lots", pub, "10"), "10", "10"), inUse: 3, wantPatch: true, wantValue: 3, wantInvalid: true},
		{name: "invalid and already 0", node: node(ann(capA, "lots", pub, "0"), "0", "0"), wantValue: 0, wantInvalid: true},
		{name: "invalid and already the 3 in use", node: node(ann(capA, "-1", pub, "3"), "3", "3"), inUse: 3, wantValue: 3, wantInvalid: true},
		{name: "invalid, a holder left: lowered to what is in use", node: node(ann(capA, "-1", pub, "3"), "3", "3"), inUse: 2, wantPatch: true, wantValue: 2, wantInvalid: true},
		{name: "invalid label, 2 in use: 2", node: labelled(node(nil, "", ""), "x"), inUse: 2, wantPatch: true, wantValue: 2, wantInvalid: true},
		{name: "kubelet reset ours to 0", node: node(ann(pub, "10"), "0", "0"), wantPatch: true, wantValue: 10},
		{name: "allocatable missing", node: node(ann(pub, "10"), "10", ""), wantPatch: true, wantValue: 10},
		{name: "someone else's resource", node: node(nil, "4", "4"), wantValue: 10, wantForeign: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.node, underlay.Rule{Default: 10}, Use{InUse: tc.inUse})
			if d.Patch != tc.wantPatch || d.Want != tc.wantValue || (d.Invalid != "") != tc.wantInvalid || (d.Foreign != "") != tc.wantForeign {
				t.Fatalf("Decide = %+v, want patch %v value %d invalid %v foreign %v", d, tc.wantPatch, tc.wantValue, tc.wantInvalid, tc.wantForeign)
			}
		})
	}
}

func TestPatchShape(t *testing.T) {
	var got map[string]map[string]map[string]string
	if err := json.Unmarshal(Patch(12, nil), &got); err != nil {
		t.Fatal(err)
	}
	if got["metadata"]["annotations"][PublishedAnnotation] != "12" ||
		got["status"]["capacity"][names.UnderlayIPResource] != "12" ||
		got["status"]["allocatable"][names.UnderlayIPResource] != "12" {
		t.Fatalf("patch %s", Patch(12, nil))
	}
}

// TestPublisherPublishes runs the controller against a fake clientset: a
// node gets its capacity, a foreign one is left alone, and a second pass
// writes nothing.
func TestPublisherPublishes(t *testing.T) {
	ours := node(map[string]string{names.UnderlayIPCapacityAnnotation: "4"}, "", "")
	ours.Name = "ours"
	foreign := node(nil, "7", "7")
	foreign.Name = "foreign"
	cs := fake.NewClientset(ours, foreign)
	factory := informers.NewSharedInformerFactory(cs, 0)
	p, err := New(cs, factory.Core().V1().Nodes(), Options{Rule: underlay.Rule{Default: 10}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go p.Run(ctx)

	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "ours", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		q := n.Status.Allocatable[underlay.Resource]
		return q.Value() == 4 && n.Annotations[PublishedAnnotation] == "4", nil
	})
	if err != nil {
		t.Fatalf("capacity not published: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // let the patch's own update event pass
	patches := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "patch" {
			patches++
			if a.GetSubresource() != "status" {
				t.Errorf("patched %q, want the status subresource", a.GetSubresource())
			}
		}
	}
	if patches != 1 {
		t.Errorf("%d patches, want exactly 1 (none for the foreign node, none once current)", patches)
	}
	f, _ := cs.CoreV1().Nodes().Get(ctx, "foreign", metav1.GetOptions{})
	if q := f.Status.Capacity[underlay.Resource]; q.Value() != 7 {
		t.Errorf("foreign node's resource changed to %s", q.String())
	}
}
