package extender

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/extender/publisher"
	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// capscaleNode is realisticNode i with capscale's annotations and label set
// (an empty value leaves the key out) and, if status is not empty, that much
// of the underlay resource in capacity and allocatable.
func capscaleNode(i int, annotation, label, marker, status string) *v1.Node {
	n := realisticNode(i)
	set := func(m map[string]string, k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set(n.Annotations, names.UnderlayIPCapacityAnnotation, annotation)
	set(n.Annotations, publisher.PublishedAnnotation, marker)
	set(n.Labels, names.UnderlayIPCapacityLabel, label)
	if status != "" {
		n.Status.Capacity[underlay.Resource] = resource.MustParse(status)
		n.Status.Allocatable[underlay.Resource] = resource.MustParse(status)
	}
	// A foreign extended resource and a look-alike key stay out.
	n.Status.Capacity["example.com/gpu"] = resource.MustParse("4")
	n.Annotations["capscale.io/something-else"] = "x"
	return &n
}

func TestCompactNodeKeepsExactlyWhatTheReadersUse(t *testing.T) {
	for _, tc := range []struct {
		name string
		full *v1.Node
		want v1.Node
	}{
		{
			name: "no capscale keys: identity only",
			full: capscaleNode(1, "", "", "", ""),
			want: v1.Node{ObjectMeta: metav1.ObjectMeta{Name: realisticNode(1).Name, UID: realisticNode(1).UID, ResourceVersion: "123456789"}},
		},
		{
			name: "annotation, label, marker and published resource",
			full: capscaleNode(2, "5", "3", "5", "5"),
			want: v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: realisticNode(2).Name, UID: realisticNode(2).UID, ResourceVersion: "123456789",
					Annotations: map[string]string{names.UnderlayIPCapacityAnnotation: "5", publisher.PublishedAnnotation: "5"},
					Labels:      map[string]string{names.UnderlayIPCapacityLabel: "3"}},
				Status: v1.NodeStatus{
					Capacity:    v1.ResourceList{underlay.Resource: resource.MustParse("5")},
					Allocatable: v1.ResourceList{underlay.Resource: resource.MustParse("5")},
				},
			},
		},
		{
			name: "the capacity source's value and origin",
			full: func() *v1.Node {
				n := capscaleNode(4, "", "3", "", "")
				n.Annotations[names.UnderlayIPSourceCapacityAnnotation] = "12"
				n.Annotations[names.UnderlayIPSourceAnnotation] = "cilium ciliumnodes.cilium.io/n"
				return n
			}(),
			want: v1.Node{ObjectMeta: metav1.ObjectMeta{Name: realisticNode(4).Name, UID: realisticNode(4).UID, ResourceVersion: "123456789",
				Annotations: map[string]string{names.UnderlayIPSourceCapacityAnnotation: "12", names.UnderlayIPSourceAnnotation: "cilium ciliumnodes.cilium.io/n"},
				Labels:      map[string]string{names.UnderlayIPCapacityLabel: "3"}}},
		},
		{
			name: "an empty annotation is kept: present, and invalid",
			full: func() *v1.Node {
				n := capscaleNode(3, "", "", "", "")
				n.Annotations[names.UnderlayIPCapacityAnnotation] = ""
				return n
			}(),
			want: v1.Node{ObjectMeta: metav1.ObjectMeta{Name: realisticNode(3).Name, UID: realisticNode(3).UID, ResourceVersion: "123456789",
				Annotations: map[string]string{names.UnderlayIPCapacityAnnotation: ""}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.full.DeepCopy()
			obj, err := StripNode(tc.full)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := obj.(*v1.Node)
			if !ok {
				t.Fatalf("StripNode returned %T, want *v1.Node", obj)
			}
			if !equality.Semantic.DeepEqual(*got, tc.want) {
				t.Errorf("stripped node\n%+v\nwant\n%+v", *got, tc.want)
			}
			// The structural fact the memory saving rests on.
			if got.Status.Images != nil || got.Status.Conditions != nil || got.ManagedFields != nil ||
				got.Status.VolumesAttached != nil || got.Status.Addresses != nil || got.Spec.PodCIDRs != nil {
				t.Errorf("stripped node keeps images, conditions, managedFields, volumes, addresses or spec: %+v", got)
			}
			if !equality.Semantic.DeepEqual(before, tc.full) {
				t.Error("StripNode modified its input")
			}
		})
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "n", Obj: capscaleNode(1, "", "", "", "")}
	if obj, err := StripNode(tomb); err != nil || obj != any(tomb) {
		t.Errorf("non-nodes must pass through: %v %v", obj, err)
	}
}

// TestStrippedNodeDecidesAlike: the ledger and the publisher, the informer's
// two readers, come to the same result on a stripped node as on the full
// one, whatever capscale's keys say.
func TestStrippedNodeDecidesAlike(t *testing.T) {
	const def = 10
	for _, tc := range []struct {
		name                              string
		annotation, label, marker, status string
		// source is the capacity source's mirrored value.
		source string
	}{
		{name: "nothing: default, to publish"},
		{name: "annotation", annotation: "5"},
		{name: "label", label: "3"},
		{name: "annotation overrides label", annotation: "7", label: "3"},
		{name: "invalid annotation", annotation: "lots", label: "3"},
		{name: "invalid label", label: "-1"},
		{name: "published and current", label: "3", marker: "3", status: "3"},
		{name: "published, label changed", label: "4", marker: "3", status: "3"},
		{name: "marker disagrees with status", annotation: "2", marker: "1", status: "2"},
		{name: "foreign resource: no marker", annotation: "2", status: "8"},
		{name: "marker without resource", marker: "10"},
		{name: "source overrides label", source: "12", label: "3"},
		{name: "annotation overrides source", annotation: "2", source: "12"},
		{name: "invalid source", source: "invalid: no object", label: "3"},
		{name: "invalid source, published", source: "invalid: no object", marker: "3", status: "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := capscaleNode(7, tc.annotation, tc.label, tc.marker, tc.status)
			if tc.source != "" {
				full.Annotations[names.UnderlayIPSourceCapacityAnnotation] = tc.source
				full.Annotations[names.UnderlayIPSourceAnnotation] = "s things.example.com/n"
			}
			stripped := CompactNode(full)
			if got, want := publisher.Decide(stripped, underlay.Rule{Default: def}, publisher.Use{InUse: 2}), publisher.Decide(full, underlay.Rule{Default: def}, publisher.Use{InUse: 2}); got != want {
				t.Errorf("publisher: stripped %+v, full %+v", got, want)
			}
			lf, ls := NewLedger(LedgerOptions{DefaultCapacity: def}), NewLedger(LedgerOptions{DefaultCapacity: def})
			lf.SetNode(full)
			ls.SetNode(stripped)
			if got, want := ls.Report(), lf.Report(); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("ledger: stripped %+v, full %+v", got, want)
			}
		})
	}
}

func TestNodeInformerCachesStrippedNodes(t *testing.T) {
	full := capscaleNode(4, "", "3", "", "")
	cs := fake.NewClientset(full)
	factory := kube.InformerFactory(cs)
	inf, err := NodeInformer(factory)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := publisher.New(cs, factory.Core().V1().Nodes(), publisher.Options{Rule: underlay.Rule{Default: 10}})
	if err != nil || pub == nil {
		t.Fatalf("publisher over the node informer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("node informer did not sync")
	}
	// The publisher's lister reads the same, stripped cache.
	got, err := factory.Core().V1().Nodes().Lister().Get(full.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got, CompactNode(full)) {
		t.Errorf("cached node %+v, want the compact node", got)
	}
	if _, err := NodeInformer(factory); err == nil {
		t.Error("setting the transform on a started informer succeeded")
	}
}

// nodeWire is n realistic Nodes as the apiserver sends them to an informer
// (protobuf).
func nodeWire(n int) ([][]byte, error) {
	wire := make([][]byte, n)
	for i := range wire {
		node := realisticNode(i)
		var err error
		if wire[i], err = node.Marshal(); err != nil {
			return nil, fmt.Errorf("encoding node %s: %w", node.Name, err)
		}
	}
	return wire, nil
}

// nodeCacheHeap fills an informer's indexer with the nodes of wire, each
// decoded (as the informer's watch does, so that every string is its own
// allocation) and passed through transform, and returns the live heap the
// cache holds per node.
func nodeCacheHeap(wire [][]byte, transform cache.TransformFunc) (perNode float64, store cache.Indexer, err error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	store = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for i, b := range wire {
		node := &v1.Node{}
		if err := node.Unmarshal(b); err != nil {
			return 0, nil, fmt.Errorf("decoding node %d: %w", i, err)
		}
		obj := any(node)
		if transform != nil {
			if obj, err = transform(obj); err != nil {
				return 0, nil, err
			}
		}
		if err := store.Add(obj); err != nil {
			return 0, nil, err
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(wire)), store, nil
}

// BenchmarkNodeCacheMemory reports the heap the extender's node cache holds
// per node at 5000 realistic Nodes: raw, with the factory's managedFields
// transform alone (the cache before StripNode), and stripped.
func BenchmarkNodeCacheMemory(b *testing.B) {
	const nodes = 5000
	wire, err := nodeWire(nodes)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		transform cache.TransformFunc
	}{
		{name: "full"},
		{name: "drop-managed-fields", transform: kube.DropManagedFields},
		{name: "strip", transform: StripNode},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var perNode float64
			for b.Loop() {
				p, store, err := nodeCacheHeap(wire, tc.transform)
				if err != nil {
					b.Fatal(err)
				}
				if len(store.ListKeys()) != nodes {
					b.Fatalf("%d nodes cached, want %d", len(store.ListKeys()), nodes)
				}
				perNode = p
			}
			b.ReportMetric(perNode, "heap-B/node")
			b.ReportMetric(perNode*nodes/(1<<20), "heap-MiB/5000-nodes")
		})
	}
}

// TestNodeCacheHeapShrinks checks the structural fact the benchmark
// measures: a cache of stripped nodes holds none of the big parts. Bytes are
// the benchmark's to report, not a test's to threshold.
func TestNodeCacheHeapShrinks(t *testing.T) {
	wire, err := nodeWire(50)
	if err != nil {
		t.Fatal(err)
	}
	_, store, err := nodeCacheHeap(wire, StripNode)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range store.List() {
		n := obj.(*v1.Node)
		if n.Status.Images != nil || n.Status.Conditions != nil || n.ManagedFields != nil || len(n.Labels) != 0 || len(n.Annotations) != 0 {
			t.Fatalf("cached node %s keeps more than capscale reads: %+v", n.Name, n)
		}
	}
}
