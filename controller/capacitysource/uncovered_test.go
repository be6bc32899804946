package capacitysource

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// eniPoolOnly is a draws-all source covering one node pool.
const eniPoolOnly = `
sources:
- name: cilium
  preset: cilium-eni
  nodeSelector: {matchLabels: {pool: eni}}
`

// uncoveredSources is docs/capacity-sources.md's file for a cluster whose
// draws-all source covers one node pool and whose other pool takes its
// pods' IPs from elsewhere ("A node no source covers, under draws: all").
const uncoveredSources = eniPoolOnly + `- name: other-cni
  resource: {version: v1, resource: nodes}
  node: object.metadata.name
  capacity: quantity(object.status.allocatable.pods).asInteger()
  draws: all
  nodeSelector: {matchLabels: {pool: other}}
`

// TestUncoveredNodeUnderDrawsAll pins what docs/capacity-sources.md says of a
// node no source covers while a source draws all: the mirror marks it
// none, and the rule gives it the label or --default-capacity, so with the
// draws-all policy (every pod asks for an IP) it holds at most that many
// pods. The two ways out the docs give: the label of the node's pod
// capacity, or a source of the Node's own allocatable pods for that pool.
func TestUncoveredNodeUnderDrawsAll(t *testing.T) {
	rule := underlay.Rule{Default: 10, AwaitSource: true}
	node := func(name, pool string, labels map[string]string) *corev1.Node {
		l := map[string]string{"pool": pool}
		for k, v := range labels {
			l[k] = v
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: l},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}}}
	}
	for _, tc := range []struct {
		name     string
		file     string
		other    *corev1.Node
		ips      int64
		source   string
		mirrored string
	}{
		{name: "uncovered: the default caps its pods", file: eniPoolOnly,
			other: node("other-1", "other", nil), ips: 10, source: underlay.SourceDefault},
		{name: "uncovered, with the label of its pod capacity", file: eniPoolOnly,
			other: node("other-1", "other", map[string]string{names.UnderlayIPCapacityLabel: "110"}), ips: 110, source: underlay.SourceLabel},
		{name: "covered by a source of its allocatable pods", file: uncoveredSources,
			other: node("other-1", "other", nil), ips: 110, source: underlay.SourceIPAM, mirrored: "110"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			f, err := Decode([]byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			srcs, err := f.Compile()
			if err != nil {
				t.Fatal(err)
			}
			eni := node("eni-1", "eni", nil)
			client := fake.NewClientset(eni, tc.other)
			objs := []runtime.Object{ipamtest.CiliumNodeENI("eni-1", "uid-eni-1", 12, nil)}
			kinds := map[schema.GroupVersionResource]string{srcs[0].Resource.GVR(): "CiliumNodeList"}
			if len(srcs) > 1 {
				kinds[srcs[1].Resource.GVR()] = "NodeList"
				for _, n := range []*corev1.Node{eni, tc.other} {
					u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
					if err != nil {
						t.Fatal(err)
					}
					u["apiVersion"], u["kind"] = "v1", "Node"
					objs = append(objs, &unstructured.Unstructured{Object: u})
				}
			}
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, objs...)
			c, err := New(Config{Client: client, Dynamic: dyn, Sources: srcs, Metrics: NewMetrics(prometheus.NewRegistry())})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			var got *corev1.Node
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				if got, err = client.CoreV1().Nodes().Get(ctx, "other-1", metav1.GetOptions{}); err != nil {
					return false, err
				}
				return underlay.Read(got.Annotations), nil
			}); err != nil {
				t.Fatalf("other-1 never mirrored: %v", err)
			}
			if v := got.Annotations[names.UnderlayIPSourceCapacityAnnotation]; v != tc.mirrored {
				t.Errorf("other-1 mirrored capacity %q, want %q (annotations %v)", v, tc.mirrored, got.Annotations)
			}
			if cp := rule.Capacity(got.Annotations, got.Labels); cp.IPs != tc.ips || cp.Source != tc.source || cp.Invalid != "" {
				t.Errorf("other-1 capacity %+v, want %d from %s", cp, tc.ips, tc.source)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
