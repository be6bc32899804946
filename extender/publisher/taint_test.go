package publisher

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

func tainted(n *v1.Node, keys ...string) *v1.Node {
	for _, k := range keys {
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: k, Effect: v1.TaintEffectNoSchedule})
	}
	return n
}

// TestStartupTaint: a node an autoscaler launched with the startup taint is
// capscale's to publish even when its status already holds the resource
// (Karpenter's KWOK provider writes the launching pods' requests there),
// and the taint goes only once the rule's valid capacity is what is
// published.
func TestStartupTaint(t *testing.T) {
	const taint = names.UnderlayIPUnpublishedTaint
	lab := func(n *v1.Node, c string) *v1.Node { return labelled(n, c) }
	tests := []struct {
		name        string
		node        *v1.Node
		wantPatch   bool
		wantValue   int64
		wantForeign bool
		wantRelease bool
	}{
		{name: "launched with the pods' requests in status: published over them, then released",
			node: tainted(lab(node(nil, "3", "3"), "8"), taint), wantPatch: true, wantValue: 8, wantRelease: true},
		{name: "already published: released", node: tainted(lab(node(map[string]string{PublishedAnnotation: "8"}, "8", "8"), "8"), taint), wantValue: 8, wantRelease: true},
		{name: "new node without a value: the default, released", node: tainted(node(nil, "", ""), taint), wantPatch: true, wantValue: 10, wantRelease: true},
		{name: "invalid label keeps the taint", node: tainted(lab(node(nil, "", ""), "x"), taint), wantPatch: true, wantValue: 0},
		{name: "no taint: someone else's resource stays theirs", node: lab(node(nil, "3", "3"), "8"), wantValue: 8, wantForeign: true},
		{name: "another taint is not ours", node: tainted(lab(node(nil, "3", "3"), "8"), "example.com/other"), wantValue: 8, wantForeign: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.node, underlay.Rule{Default: 10}, Use{})
			if d.Patch != tc.wantPatch || d.Want != tc.wantValue || (d.Foreign != "") != tc.wantForeign {
				t.Fatalf("Decide = %+v, want patch %v value %d foreign %v", d, tc.wantPatch, tc.wantValue, tc.wantForeign)
			}
			if got := ReleaseTaint(tc.node, d); got != tc.wantRelease {
				t.Fatalf("ReleaseTaint = %v, want %v", got, tc.wantRelease)
			}
		})
	}
}

// TestTaintPatch: the patch removes only capscale's taint, and fails when
// the taints changed since they were read.
func TestTaintPatch(t *testing.T) {
	read := tainted(&v1.Node{}, "karpenter.sh/disrupted", names.UnderlayIPUnpublishedTaint, "example.com/other").Spec.Taints
	patch, err := TaintPatch(read)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	doc := func(taints []v1.Taint) []byte {
		b, err := json.Marshal(v1.Node{Spec: v1.NodeSpec{Taints: taints}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	out, err := p.Apply(doc(read))
	if err != nil {
		t.Fatal(err)
	}
	var got v1.Node
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Taints) != 2 || got.Spec.Taints[0].Key != "karpenter.sh/disrupted" || got.Spec.Taints[1].Key != "example.com/other" {
		t.Fatalf("taints after the patch %+v, want the two others in order", got.Spec.Taints)
	}
	if _, err := p.Apply(doc(read[1:])); err == nil {
		t.Fatal("the patch applied to taints that changed since they were read")
	}
}

// TestPublisherReleasesTheTaint: a node launched with the startup taint and
// the launching pods' requests in its status gets the rule's capacity, then
// loses the taint and only it; an invalid one keeps it.
func TestPublisherReleasesTheTaint(t *testing.T) {
	launched := tainted(labelled(node(nil, "3", "3"), "8"), "karpenter.sh/disrupted", names.UnderlayIPUnpublishedTaint)
	launched.Name = "launched"
	invalid := tainted(labelled(node(nil, "", ""), "x"), names.UnderlayIPUnpublishedTaint)
	invalid.Name = "invalid"
	cs := fake.NewClientset(launched, invalid)
	p, _ := newTestPublisher(t, cs, Options{Rule: underlay.Rule{Default: 10}})
	defer runTerm(p)()
	waitPublished(t, cs, "launched", 8)
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "launched", metav1.GetOptions{})
		return err == nil && len(n.Spec.Taints) == 1 && n.Spec.Taints[0].Key == "karpenter.sh/disrupted", err
	})
	if err != nil {
		t.Fatalf("the startup taint was not removed alone: %v", err)
	}
	waitPublished(t, cs, "invalid", 0)
	n, err := cs.CoreV1().Nodes().Get(context.Background(), "invalid", metav1.GetOptions{})
	if err != nil || !HasStartupTaint(n) {
		t.Fatalf("the invalid node lost its startup taint (%v): %+v", err, n.Spec.Taints)
	}
}
