package capacitysource

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestWithUsedFrom: the used figure of a node whose source reads a second
// resource is the sum of that resource's objects mapped to it, 0 without
// any, invalid when one fails; an uncovered or invalid node is left alone.
func TestWithUsedFrom(t *testing.T) {
	valid := Mirror{Value: "6", Origin: "wb nodeslicepools.whereabouts.cni.cncf.io/kube-system/pods", Draws: underlay.DrawsAll}
	pool := func(ref string, used int64) UsedResult {
		return UsedResult{Ref: ref, Nodes: []string{"n1"}, Used: used}
	}
	keyed := func(key string, used int64) UsedResult {
		return UsedResult{Ref: "ippools.whereabouts.cni.cncf.io/kube-system/" + key, Nodes: []string{"n1"}, Used: used, Key: key}
	}
	for _, tc := range []struct {
		name string
		m    Mirror
		j    Join
		objs []UsedResult
		want string
	}{
		{name: "no IPPool yet: nothing handed out", m: valid, want: "0"},
		{name: "one IPPool", m: valid, objs: []UsedResult{pool("a", 5)}, want: "5"},
		{name: "an old slice's IPPool too: summed", m: valid, objs: []UsedResult{pool("b", 2), pool("a", 3)}, want: "5"},
		{name: "one fails: invalid, naming it", m: valid, objs: []UsedResult{pool("b", 2), {Ref: "a", Err: "usedFrom.used expression: boom"}},
			want: underlay.InvalidPrefix + "a: usedFrom.used expression: boom"},
		{name: "more than the rule reads", m: valid, objs: []UsedResult{pool("a", underlay.MaxCapacity), pool("b", 1)},
			want: underlay.InvalidPrefix + fmt.Sprintf("2 objects report %d IPs in use, more than %d", underlay.MaxCapacity+1, underlay.MaxCapacity)},
		{name: "keyed: only the network's own pool", m: valid, j: Join{Keyed: true, Keys: []string{"pods-n1-s", "n1-s"}},
			objs: []UsedResult{keyed("pods-n1-s", 10), keyed("storage-n1-s", 10)}, want: "10"},
		{name: "keyed: no pool of the network yet", m: valid, j: Join{Keyed: true, Keys: []string{"pods-n1-s"}},
			objs: []UsedResult{keyed("storage-n1-s", 10)}, want: "0"},
		{name: "keyed: an object whose key fails may be this node's", m: valid, j: Join{Keyed: true, Keys: []string{"pods-n1-s"}},
			objs: []UsedResult{keyed("pods-n1-s", 1), {Ref: "x", KeyErr: "usedFrom.key expression: no such key: metadata"}},
			want: underlay.InvalidPrefix + "x: usedFrom.key expression: no such key: metadata"},
		{name: "keyed: another network's pool whose count fails is not this node's", m: valid, j: Join{Keyed: true, Keys: []string{"pods-n1-s"}},
			objs: []UsedResult{keyed("pods-n1-s", 1), {Ref: "y", Key: "storage-n1-s", Err: "usedFrom.used expression: no such key: spec"}}, want: "1"},
		{name: "keyed: its own pool's count fails", m: valid, j: Join{Keyed: true, Keys: []string{"pods-n1-s"}},
			objs: []UsedResult{{Ref: "y", Key: "pods-n1-s", Err: "usedFrom.used expression: no such key: spec"}},
			want: underlay.InvalidPrefix + "y: usedFrom.used expression: no such key: spec"},
		{name: "keyed: the source's object gives no key", m: valid, j: Join{Keyed: true, Err: "usedFrom.sourceKey gives no key for this node"},
			objs: []UsedResult{keyed("pods-n1-s", 1)}, want: underlay.InvalidPrefix + "usedFrom.sourceKey gives no key for this node"},
		{name: "uncovered", m: Uncovered, objs: []UsedResult{pool("a", 5)}, want: ""},
		{name: "capacity invalid", m: Mirror{Value: underlay.InvalidPrefix + "x", Origin: "wb"}, objs: []UsedResult{pool("a", 5)}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WithUsedFrom(tc.m, tc.j, tc.objs)
			if got.Used != tc.want {
				t.Fatalf("used %q, want %q", got.Used, tc.want)
			}
			got.Used = tc.m.Used
			if got != tc.m {
				t.Fatalf("WithUsedFrom changed more than used: %+v from %+v", got, tc.m)
			}
		})
	}
}

// TestUsedFromValidate: usedFrom is checked like the source's own
// resource, each problem named by its path, and it excludes used.
func TestUsedFromValidate(t *testing.T) {
	const base = `
sources:
- name: mine
  resource: {group: ipam.example.com, version: v1, resource: nodepools}
  node: object.spec.nodeName
  capacity: object.spec.size
  draws: marked
`
	for _, tc := range []struct {
		name, add, want string
	}{
		{name: "both", add: "  used: '1'\n  usedFrom: {resource: {group: g.io, version: v1, resource: pools}, node: object.metadata.name, used: '1'}\n",
			want: "sources[0].usedFrom: Forbidden"},
		{name: "no resource", add: "  usedFrom: {node: object.metadata.name, used: '1'}\n", want: "sources[0].usedFrom.resource: Required"},
		{name: "bad version", add: "  usedFrom: {resource: {group: g.io, version: V1, resource: pools}, node: object.metadata.name, used: '1'}\n",
			want: "sources[0].usedFrom.resource.version: Invalid"},
		{name: "bad namespace", add: "  usedFrom: {resource: {group: g.io, version: v1, resource: pools}, namespace: Kube_System, node: object.metadata.name, used: '1'}\n",
			want: "sources[0].usedFrom.namespace: Invalid"},
		{name: "no node", add: "  usedFrom: {resource: {group: g.io, version: v1, resource: pools}, used: '1'}\n", want: "sources[0].usedFrom.node: Required"},
		{name: "no used", add: "  usedFrom: {resource: {group: g.io, version: v1, resource: pools}, node: object.metadata.name}\n", want: "sources[0].usedFrom.used: Required"},
		{name: "unknown field", add: "  usedFrom: {resource: {group: g.io, version: v1, resource: pools}, node: object.metadata.name, used: '1', nodes: x}\n", want: "nodes"},
		{name: "key alone", add: "  usedFrom: {resource: {group: g.io, version: v1, resource: pools}, node: object.metadata.name, used: '1', key: object.metadata.name}\n",
			want: "sources[0].usedFrom.sourceKey: Required value: usedFrom.key is set"},
		{name: "sourceKey alone", add: "  usedFrom: {resource: {group: g.io, version: v1, resource: pools}, node: object.metadata.name, used: '1', sourceKey: '{}'}\n",
			want: "sources[0].usedFrom.key: Required value: usedFrom.sourceKey is set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(base + tc.add))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct{ name, node, used, key, sourceKey, want string }{
		{name: "node not a string", node: "1", want: "sources[0] (mine): usedFrom.node: gives int"},
		{name: "used not an int", used: "'x'", want: "sources[0] (mine): usedFrom.used: gives string"},
		{name: "key not a string", key: "1", sourceKey: "'k'", want: "sources[0] (mine): usedFrom.key: gives int, want string or a map of node names to keys"},
		{name: "sourceKey not a key", key: "object.metadata.name", sourceKey: "1",
			want: "sources[0] (mine): usedFrom.sourceKey: gives int, want string or a list of strings"},
		{name: "key does not compile", key: "objet.metadata.name", sourceKey: "'k'", want: "sources[0] (mine): usedFrom.key: ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, used := "object.metadata.name", "1"
			if tc.node != "" {
				node = tc.node
			}
			if tc.used != "" {
				used = tc.used
			}
			keys := ""
			if tc.key != "" {
				keys = fmt.Sprintf(", key: %q, sourceKey: %q", tc.key, tc.sourceKey)
			}
			f, err := Decode([]byte(base + fmt.Sprintf("  usedFrom: {resource: {group: g.io, version: v1, resource: pools}, node: %q, used: %q%s}\n", node, used, keys)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Compile(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Compile = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestPresetWhereaboutsUsedFrom: the preset reads what whereabouts hands
// out from each node's IPPool, in the NodeSlicePool's namespace, unless the
// source says its own used or usedFrom.
func TestPresetWhereaboutsUsedFrom(t *testing.T) {
	s, err := Source{Name: "wb", Preset: "whereabouts-node-slice", Namespace: "whereabouts"}.Expand()
	if err != nil {
		t.Fatal(err)
	}
	if s.UsedFrom == nil || s.UsedFrom.Resource.String() != "ippools.whereabouts.cni.cncf.io" || s.UsedFrom.Namespace != "whereabouts" {
		t.Fatalf("usedFrom %+v, want ippools.whereabouts.cni.cncf.io in whereabouts", s.UsedFrom)
	}
	if Presets["whereabouts-node-slice"].UsedFrom.Namespace != "" {
		t.Fatal("Expand changed the preset")
	}
	if s, _ := (Source{Name: "wb", Preset: "whereabouts-node-slice", Used: "0"}).Expand(); s.UsedFrom != nil {
		t.Errorf("a source with its own used still reads %+v", s.UsedFrom)
	}
	src := presetSource(t, "whereabouts-node-slice")
	// ippool is an IPPool as the CNI plugin names and fills it
	// (pkg/storage/kubernetes/ipam.go:106-134 IPPoolName, 259-269
	// toAllocationMap): offsets from the slice's first address.
	ippool := func(name, rng string, offsets ...int) map[string]any {
		allocs := map[string]any{}
		for _, o := range offsets {
			allocs[fmt.Sprint(o)] = map[string]any{"id": fmt.Sprintf("c%d", o), "podref": fmt.Sprintf("default/p%d", o), "ifname": "eth0"}
		}
		return map[string]any{"metadata": map[string]any{"name": name, "namespace": "kube-system"},
			"spec": map[string]any{"range": rng, "allocations": allocs}}
	}
	for _, tc := range []struct {
		name  string
		obj   map[string]any
		nodes []string
		used  int64
	}{
		{name: "network_name set", obj: ippool("pods-node-1-10.233.7.8-29", "10.233.7.8/29", 1, 2, 5),
			nodes: []string{"1", "node-1", "pods-node-1"}, used: 3},
		{name: "no network_name", obj: ippool("n1-10.233.7.0-29", "10.233.7.0/29", 1), nodes: []string{"n1"}, used: 1},
		{name: "made, nothing handed out", obj: ippool("pods-n2-10.233.7.16-29", "10.233.7.16/29"), nodes: []string{"n2", "pods-n2"}},
		{name: "an IPv6 slice", obj: ippool("pods-n1-fd00--40-122", "fd00::40/122", 1), nodes: []string{"n1", "pods-n1"}, used: 1},
		{name: "not named after its range", obj: ippool("other", "10.0.0.0/24", 1), used: 1},
		{name: "no range", obj: map[string]any{"metadata": map[string]any{"name": "x-"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := EvaluateUsedFrom(src.UsedFrom, "kube-system", tc.obj["metadata"].(map[string]any)["name"].(string), tc.obj)
			// A key for every node it maps to (TestPresetWhereaboutsJoin
			// checks which).
			if r.NodeErr != "" || r.Err != "" || r.KeyErr != "" || !slices.Equal(r.Nodes, tc.nodes) || r.Used != tc.used || len(r.KeyByNode) != len(tc.nodes) {
				t.Fatalf("EvaluateUsedFrom = %+v, want nodes %q, each with a key, and used %d", r, tc.nodes, tc.used)
			}
		})
	}
}

// TestMirrorUsedFrom: the mirror joins each node's IPPool to the
// NodeSlicePool's capacity: 0 in use before the node's IPPool exists, then
// what it lists, following an allocation and a release, and nothing for a
// node the source does not cover.
func TestMirrorUsedFrom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
	)
	src := presetSource(t, "whereabouts-node-slice")
	src.Name = "whereabouts"
	if src.UsedFrom == nil {
		t.Fatal("the whereabouts-node-slice preset reads no usedFrom: nothing tells what whereabouts holds on a node")
	}
	pools := src.UsedFrom.Resource.GVR()
	ippool := func(node string, n int) *unstructured.Unstructured {
		allocs := map[string]any{}
		for i := range n {
			allocs[fmt.Sprint(i+1)] = map[string]any{"id": fmt.Sprint("c", i), "podref": fmt.Sprint("default/p", i), "ifname": "eth0"}
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "IPPool",
			"metadata": map[string]any{"name": "pods-" + node + "-10.233.7.0-29", "namespace": "kube-system"},
			"spec":     map[string]any{"range": "10.233.7.0/29", "allocations": allocs}}}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{src.Resource.GVR(): "NodeSlicePoolList", pools: "IPPoolList"},
		&unstructured.Unstructured{Object: nodeSlicePool("/29", "n1", "n2")}, ippool("other", 3))
	c, err := New(Config{Client: client, Dynamic: dyn, Sources: []*Compiled{src}, Metrics: NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	used := func(name string) string {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations[names.UnderlayIPSourceUsedAnnotation]
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	waitFor("n1 and n2 at 0 used (no IPPool yet)", func() bool { return used("n1") == "0" && used("n2") == "0" })
	if _, err := dyn.Resource(pools).Namespace("kube-system").Create(ctx, ippool("n1", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("n1 at 2 used", func() bool { return used("n1") == "2" })
	if _, err := dyn.Resource(pools).Namespace("kube-system").Update(ctx, ippool("n1", 1), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("n1 at 1 used (an IP released)", func() bool { return used("n1") == "1" })
	if got := used("n2"); got != "0" {
		t.Errorf("n2 used %q, want 0", got)
	}
	if got := used("other"); got != "" {
		t.Errorf("a node the source does not cover got used %q from its IPPool", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestMirrorUsedFromPerNetwork: a node in two whereabouts networks, the
// source deciding one of them (the node expression docs/capacity-sources.md
// gives), each network with 10 pods on the node. The node's used figure
// is the 10 of the decided network's IPPool, not 20: whereabouts v0.9.2
// allocates a node's pods of a network from the one IPPool named
// <network_name>-<node>-<slice> (pkg/storage/kubernetes/ipam.go:106-121,
// 587-604), and the other network's IPPool holds none of this slice's
// addresses.
func TestMirrorUsedFromPerNetwork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	s, err := Source{Name: "whereabouts", Preset: "whereabouts-node-slice", Namespace: "kube-system",
		Node: `object.metadata.name == "pods" ? ` + Presets["whereabouts-node-slice"].Node + ` : []`}.Expand()
	if err != nil {
		t.Fatal(err)
	}
	src, err := s.compile(CostLimit)
	if err != nil {
		t.Fatal(err)
	}
	nsp := func(network, rng, slice string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "NodeSlicePool",
			"metadata": map[string]any{"name": network, "namespace": "kube-system"},
			"spec":     map[string]any{"range": rng, "sliceSize": "/28"},
			"status":   map[string]any{"allocations": []any{map[string]any{"nodeName": "n1", "sliceRange": slice}}},
		}}
	}
	ippool := func(network, slice string, n int) *unstructured.Unstructured {
		allocs := map[string]any{}
		for i := range n {
			allocs[fmt.Sprint(i+1)] = map[string]any{"id": fmt.Sprint("c", i), "podref": fmt.Sprint("default/", network, i), "ifname": "eth0"}
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "IPPool",
			"metadata": map[string]any{"name": network + "-n1-" + strings.NewReplacer("/", "-", ":", "-").Replace(slice), "namespace": "kube-system"},
			"spec":     map[string]any{"range": slice, "allocations": allocs}}}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{src.Resource.GVR(): "NodeSlicePoolList", src.UsedFrom.Resource.GVR(): "IPPoolList"},
		nsp("pods", "10.233.7.0/24", "10.233.7.0/28"), nsp("storage", "10.99.0.0/24", "10.99.0.16/28"),
		ippool("pods", "10.233.7.0/28", 10), ippool("storage", "10.99.0.16/28", 10))
	c, err := New(Config{Client: client, Dynamic: dyn, Sources: []*Compiled{src}, Metrics: NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var got map[string]string
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = n.Annotations
		_, ok := got[names.UnderlayIPSourceUsedAnnotation]
		return ok, nil
	}); err != nil {
		t.Fatalf("n1 never mirrored: %v (annotations %v)", err, got)
	}
	if got[names.UnderlayIPSourceCapacityAnnotation] != "14" || got[names.UnderlayIPSourceUsedAnnotation] != "10" {
		t.Errorf("n1 capacity %q used %q, want 14 and 10 (the pods network's IPPool only)",
			got[names.UnderlayIPSourceCapacityAnnotation], got[names.UnderlayIPSourceUsedAnnotation])
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPresetWhereaboutsJoin: an IPPool's key for each node its name may be
// of is the network part before that node, and the NodeSlicePool's keys are
// its name and "" (a network without network_name): so a node's used
// figure is its network's pools, another network's pool on the node does
// not count, and a node whose name is another's tail is not charged that
// node's IPs.
func TestPresetWhereaboutsJoin(t *testing.T) {
	src := presetSource(t, "whereabouts-node-slice")
	r := Evaluate(src, "kube-system", "pods", nodeSlicePool("/29", "node-1", "1"))
	if r.Err != "" || r.UsedKeysErr != "" || !slices.Equal(r.UsedKeys, []string{"pods", ""}) {
		t.Fatalf("Evaluate = %+v, want keys pods and \"\"", r)
	}
	pool := func(name, rng string, n int) UsedResult {
		allocs := map[string]any{}
		for i := range n {
			allocs[fmt.Sprint(i+1)] = map[string]any{"id": fmt.Sprint("c", i), "podref": fmt.Sprint("default/p", i)}
		}
		return EvaluateUsedFrom(src.UsedFrom, "kube-system", name, map[string]any{
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"range": rng, "allocations": allocs}})
	}
	p := pool("pods-node-1-10.233.7.0-29", "10.233.7.0/29", 5)
	if want := map[string]string{"pods-node-1": "", "node-1": "pods", "1": "pods-node"}; p.KeyErr != "" || !reflect.DeepEqual(p.KeyByNode, want) {
		t.Fatalf("IPPool keys %q (%s), want %q", p.KeyByNode, p.KeyErr, want)
	}
	// What the node index gives each node: every IPPool whose name has
	// the node as a tail before its slice.
	objs := []UsedResult{p, pool("pods-1-10.233.7.8-29", "10.233.7.8/29", 2),
		pool("storage-node-1-10.99.0.0-29", "10.99.0.0/29", 4), pool("node-1-10.233.9.0-29", "10.233.9.0/29", 1)}
	valid := Mirror{Value: "6", Origin: "s nodeslicepools.whereabouts.cni.cncf.io/kube-system/pods"}
	for _, tc := range []struct {
		node, want string
	}{
		{node: "1", want: "2"},
		// pods' pool, and the pool of a network without network_name
		// (which can only over-charge), not storage's.
		{node: "node-1", want: "6"},
	} {
		t.Run(tc.node, func(t *testing.T) {
			var mine []UsedResult
			for _, o := range objs {
				if slices.Contains(o.Nodes, tc.node) {
					mine = append(mine, o.ForNode(tc.node))
				}
			}
			if got := WithUsedFrom(valid, r.JoinFor(true), mine).Used; got != tc.want {
				t.Fatalf("used %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("a node the key's map does not name", func(t *testing.T) {
		o := UsedResult{Ref: "z", Nodes: []string{"n9"}, Used: 3, KeyByNode: map[string]string{"other": ""}}
		if got := WithUsedFrom(valid, r.JoinFor(true), []UsedResult{o.ForNode("n9")}).Used; got != "0" {
			t.Fatalf("used %q, want 0: an object with no key for the node counts for no key, \"\" included", got)
		}
	})
	t.Run("a key that gives no map of strings", func(t *testing.T) {
		x, err := compile(`{"n1": 1}`, cel.MapType(cel.StringType, cel.DynType), CostLimit)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := x.Key(map[string]any{}); err == nil || !strings.Contains(err.Error(), `want node names to keys`) {
			t.Fatalf("Key = %v, want an error naming what the map holds", err)
		}
	})
}

// TestPresetWhereaboutsJoinCost: the join adds nothing per slice to the
// NodeSlicePool's evaluation: 16384 slices (a /10 cut into /24s), every one
// a node's, stay within one evaluation's cost limit (a per-node map of keys
// built there exceeded it at 16384).
func TestPresetWhereaboutsJoinCost(t *testing.T) {
	src := presetSource(t, "whereabouts-node-slice")
	allocs := make([]any, 16384)
	for i := range allocs {
		allocs[i] = map[string]any{"nodeName": fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", i/256, i%256), "sliceRange": fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)}
	}
	r := Evaluate(src, "kube-system", "pods", map[string]any{"metadata": map[string]any{"name": "pods"},
		"spec": map[string]any{"range": "10.0.0.0/10", "sliceSize": "/24"}, "status": map[string]any{"allocations": allocs}})
	if r.NodeErr != "" || r.Err != "" || r.UsedKeysErr != "" || len(r.Nodes) != len(allocs) {
		t.Fatalf("Evaluate: %d nodes, %q %q %q", len(r.Nodes), r.NodeErr, r.Err, r.UsedKeysErr)
	}
}
