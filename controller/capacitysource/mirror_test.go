package capacitysource

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
	"github.com/capscale/capscale/internal/names"
)

// TestMirror runs the controller on fake clients: it follows the objects
// onto the Nodes, leaves alone a node no source covers, removes what a
// removed source left, marks a covered node without an object invalid with
// an Event, and patches only when the value or origin changes.
func TestMirror(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node := func(name string, labels, annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: labels, Annotations: annotations}}
	}
	underlayPool := map[string]string{"pool": "underlay"}
	client := fake.NewClientset(
		node("n1", underlayPool, nil),
		node("n2", underlayPool, nil),
		node("plain", nil, map[string]string{"keep": "me"}),
		// Left by a source since removed from the file.
		node("stale", nil, map[string]string{names.UnderlayIPSourceCapacityAnnotation: "4", names.UnderlayIPSourceAnnotation: "old ippools.example.com/stale"}),
	)
	scheme := runtime.NewScheme()
	src := presetSource(t, "cilium-eni")
	src.Name = "cilium"
	if src.Selector, _ = metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: underlayPool}); src.Selector == nil {
		t.Fatal("selector")
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{src.Resource.GVR(): "CiliumNodeList"},
		ipamtest.CiliumNodeENI("n1", "uid-n1", 12, nil))
	rec := record.NewFakeRecorder(10)
	reg := prometheus.NewRegistry()
	c, err := New(Config{Client: client, Dynamic: dyn, Sources: []*Compiled{src}, Recorder: rec, Metrics: NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	annotations := func(name string) map[string]string {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	waitFor("n1 mirrored", func() bool { return annotations("n1")[names.UnderlayIPSourceCapacityAnnotation] == "10" })
	if got := annotations("n1")[names.UnderlayIPSourceAnnotation]; got != "cilium ciliumnodes.cilium.io/n1" {
		t.Errorf("n1 origin %q", got)
	}
	waitFor("n2 invalid (selected, no CiliumNode)", func() bool {
		return strings.HasPrefix(annotations("n2")[names.UnderlayIPSourceCapacityAnnotation], "invalid: no ciliumnodes.cilium.io object")
	})
	waitFor("the stale mirror removed", func() bool { _, ok := annotations("stale")[names.UnderlayIPSourceCapacityAnnotation]; return !ok })
	// Read, not covered: only the mark that ends the rule's wait.
	waitFor("the uncovered node marked", func() bool {
		return annotations("plain")[names.UnderlayIPSourceAnnotation] == names.UnderlayIPSourceNone
	})
	if a := annotations("plain"); len(a) != 2 || a["keep"] != "me" {
		t.Errorf("a node no source covers got more than the mark: %v", a)
	}
	if got := annotations("n1")[names.UnderlayIPDrawsAnnotation]; got != "all" {
		t.Errorf("n1 draws %q, want the preset's all", got)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "InvalidUnderlayIPCapacitySource") || !strings.Contains(e, "no ciliumnodes.cilium.io object maps to this node") {
			t.Errorf("event %q", e)
		}
	case <-time.After(5 * time.Second):
		t.Error("no Warning Event for the invalid node")
	}
	if !c.HasSynced() {
		t.Error("not synced after mirroring")
	}

	gvr := src.Resource.GVR()
	// The metric counts a patch after the API has it: wait for the four
	// first patches (n1, n2, stale, plain) to be counted, or a late one
	// reads as a patch of the change below.
	patches := func() float64 { return testutil.ToFloat64(c.cfg.Metrics.patches.WithLabelValues("success")) }
	waitFor("the first four patches counted", func() bool { return patches() >= 4 })
	patchesBefore := patches()
	// A status change that leaves the count alone patches nothing.
	u := ipamtest.CiliumNodeENI("n1", "uid-n1", 12, []string{"shop/a", "shop/b"})
	if _, err := dyn.Resource(gvr).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pool grows: n1 follows.
	if _, err := dyn.Resource(gvr).Update(ctx, ipamtest.CiliumNodeENI("n1", "uid-n1", 20, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("n1 at 18", func() bool { return annotations("n1")[names.UnderlayIPSourceCapacityAnnotation] == "18" })
	// The Node shows 18 a moment before the counter does. One key is never
	// synced twice at once, so a patch of the first update would be counted
	// before this one: wait for one, then there must be exactly one.
	waitFor("the patch to 18 counted", func() bool { return patches() > patchesBefore })
	if got := patches() - patchesBefore; got != 1 {
		t.Errorf("%v patches for one change of the count, want 1", got)
	}
	// n2's object arrives.
	if _, err := dyn.Resource(gvr).Create(ctx, ipamtest.CiliumNodeENI("n2", "uid-n2", 5, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("n2 at 3", func() bool { return annotations("n2")[names.UnderlayIPSourceCapacityAnnotation] == "3" })
	// n1's object goes: invalid, never the label or the default.
	if err := dyn.Resource(gvr).Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("n1 invalid", func() bool {
		return strings.HasPrefix(annotations("n1")[names.UnderlayIPSourceCapacityAnnotation], "invalid: ")
	})
	// A malformed object: invalid with the expression's reason.
	bad := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cilium.io/v2", "kind": "CiliumNode",
		"metadata": map[string]any{"name": "n1"}, "spec": map[string]any{"ipam": map[string]any{"pool": int64(5)}}}}
	if _, err := dyn.Resource(gvr).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("n1 invalid with the expression's reason", func() bool {
		return strings.Contains(annotations("n1")[names.UnderlayIPSourceCapacityAnnotation], "capacity expression:")
	})
	if got := testutil.ToFloat64(c.cfg.Metrics.nodes.WithLabelValues("cilium", "invalid")); got != 1 {
		t.Errorf("capacity_source_nodes{cilium,invalid} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(c.cfg.Metrics.nodes.WithLabelValues("cilium", "valid")); got != 1 {
		t.Errorf("capacity_source_nodes{cilium,valid} = %v, want 1", got)
	}
	// The queue's series: every sync waited and ran, and none is left. A
	// sync's duration is observed after its patch is counted, so wait.
	for name, h := range map[string]prometheus.Histogram{"queue_wait": c.cfg.Metrics.wait, "sync_duration": c.cfg.Metrics.work} {
		waitFor(name+" counting every patched sync", func() bool {
			var m dto.Metric
			if err := h.Write(&m); err != nil {
				t.Fatal(err)
			}
			return float64(m.GetHistogram().GetSampleCount()) >= patches()
		})
	}
	waitFor("the queue empty", func() bool { return testutil.ToFloat64(c.cfg.Metrics.depth) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestMirrorOneObjectManyNodes: an object whose node expression names a
// list (whereabouts' NodeSlicePool) gives each node it names its capacity,
// and a node it stops naming (its slice freed) is invalid again.
func TestMirrorOneObjectManyNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
	)
	src := presetSource(t, "whereabouts-node-slice")
	src.Name = "whereabouts"
	gvr := src.Resource.GVR()
	kinds := map[schema.GroupVersionResource]string{gvr: "NodeSlicePoolList"}
	if src.UsedFrom != nil {
		kinds[src.UsedFrom.Resource.GVR()] = "IPPoolList"
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds,
		&unstructured.Unstructured{Object: nodeSlicePool("/29", "n1", "n2")})
	c, err := New(Config{Client: client, Dynamic: dyn, Sources: []*Compiled{src}, Metrics: NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	capacity := func(name string) string {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations[names.UnderlayIPSourceCapacityAnnotation]
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	waitFor("n1 and n2 at 6", func() bool { return capacity("n1") == "6" && capacity("n2") == "6" })
	// n2's slice freed (whereabouts' removeUnusedNodes): the object no
	// longer names it, so the source, which has no nodeSelector, leaves it
	// invalid until a slice names it again, never the label or the default.
	if _, err := dyn.Resource(gvr).Namespace("kube-system").Update(ctx, &unstructured.Unstructured{Object: nodeSlicePool("/29", "n1")}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("n2 awaiting a slice", func() bool {
		return capacity("n2") == "invalid: no nodeslicepools.whereabouts.cni.cncf.io object maps to this node"
	})
	if got := capacity("n1"); got != "6" {
		t.Errorf("n1 at %q, want 6", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
