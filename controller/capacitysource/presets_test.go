package capacitysource

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
)

// decoded round-trips u through JSON as the dynamic client would decode it
// from the apiserver.
func decoded(t testing.TB, u *unstructured.Unstructured) map[string]any {
	t.Helper()
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return fromJSON(t, b)
}

func ciliumENI(t testing.TB, pool, pods int) map[string]any {
	names := make([]string, pods)
	for i := range names {
		names[i] = fmt.Sprintf("shop/web-%d", i)
	}
	return decoded(t, ipamtest.CiliumNodeENI("n1", "uid-1", pool, names))
}

func presetSource(t testing.TB, preset string) *Compiled {
	t.Helper()
	s, err := Source{Name: "s", Preset: preset}.Expand()
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.compile(CostLimit)
	if err != nil {
		t.Fatalf("preset %s does not compile: %v", preset, err)
	}
	return c
}

// TestPresets: each preset on objects shaped as the IPAM's controllers
// write them (package ipamtest) gives the IPs the node can hand to pods.
func TestPresets(t *testing.T) {
	withRelease := func(u *unstructured.Unstructured, states map[string]string) *unstructured.Unstructured {
		rel := map[string]any{}
		for k, v := range states {
			rel[k] = v
		}
		u.Object["status"].(map[string]any)["ipam"].(map[string]any)["release-ips"] = rel
		return u
	}
	// The operator's first IPs, before the agent took its router and
	// health IPs out of them (status.ipam.used still empty).
	beforeAgent := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		delete(u.Object["status"].(map[string]any)["ipam"].(map[string]any), "used")
		return u
	}
	tests := []struct {
		name, preset string
		obj          *unstructured.Unstructured
		want         int64
		err          string
	}{
		{name: "ENI: the pool less the agent's router and health IPs", preset: "cilium-eni",
			obj: ipamtest.CiliumNodeENI("n1", "u", 12, []string{"shop/a", "shop/b"}), want: 10},
		{name: "ENI: pods in use do not lower the capacity (capscale counts them)", preset: "cilium-eni",
			obj: ipamtest.CiliumNodeENI("n1", "u", 12, []string{"shop/a", "shop/b", "shop/c", "shop/d"}), want: 10},
		{name: "ENI: IPs being released are not for new pods", preset: "cilium-eni",
			obj: withRelease(ipamtest.CiliumNodeENI("n1", "u", 12, nil), map[string]string{
				"10.0.1.13": "do-not-release", "10.0.1.14": "marked-for-release", "10.0.1.15": "ready-for-release", "10.9.9.9": "released"}),
			want: 8},
		{name: "ENI: the operator's first IPs before the agent took its router and health: those two still count", preset: "cilium-eni",
			obj: beforeAgent(ipamtest.CiliumNodeENI("n1", "u", 8, nil)), want: 6},
		{name: "ENI: a pool of one, before the agent: 0, not negative", preset: "cilium-eni",
			obj: beforeAgent(ipamtest.CiliumNodeENI("n1", "u", 1, nil)), want: 0},
		{name: "ENI: more endpoints listed than the pool holds: negative, invalid (the floor is not taken beyond the pool)", preset: "cilium-eni",
			obj: func() *unstructured.Unstructured {
				u := ipamtest.CiliumNodeENI("n1", "u", 3, nil)
				pool := u.Object["spec"].(map[string]any)["ipam"].(map[string]any)["pool"].(map[string]any)
				for ip := range pool {
					if len(pool) > 1 {
						delete(pool, ip)
					}
				}
				return u
			}(), err: "negative: -1"},
		{name: "ENI: no pool yet (the operator has not allocated)", preset: "cilium-eni",
			obj: &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "n1"}, "spec": map[string]any{}}}, want: 0},
		{name: "Azure: the same fields", preset: "cilium-azure",
			obj: ipamtest.CiliumNodeAzure("n1", "u", 30, []string{"shop/a"}), want: 28},
		// v1.20 agents: the multi-pool allocator in ENI mode (issue 49 §1).
		{name: "ENI, v1.20 agent: the allocated CIDRs less router, health and ingress", preset: "cilium-eni",
			obj: ipamtest.CiliumNodeENIMultiPool("n1", "u", 12, 12, 3, ipamtest.IP(0), ipamtest.IP(1), ipamtest.IP(2)), want: 9},
		{name: "ENI, v1.20 agent: the agent's allocation lags the operator's pool (cilium#47910)", preset: "cilium-eni",
			obj: ipamtest.CiliumNodeENIMultiPool("n1", "u", 144, 96, 69, ipamtest.IP(0), ipamtest.IP(1)), want: 94},
		{name: "ENI, v1.20 agent: an endpoint IP outside the allocation is not the pool's", preset: "cilium-eni",
			obj: ipamtest.CiliumNodeENIMultiPool("n1", "u", 12, 12, 0, "10.99.0.1", ipamtest.IP(1)), want: 11},
		{name: "multi-pool: a /28 less network and broadcast; a delegated /28 of another pool is not counted", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{
				{Pool: "default", CIDRs: []string{"10.10.0.0/28"}},
				{Pool: "underlay", CIDRs: []string{"10.20.0.16/28"}, AllowFirstIP: true, AllowLastIP: true},
			}, "10.20.0.17", "10.20.0.18"), want: 14},
		// The operator's first CIDRs, before the agent took its router and
		// health IPs out of them (v1.20: spec.addresses, spec.health).
		{name: "multi-pool: before the agent took its router and health: those two still come off", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{{Pool: "default", CIDRs: []string{"10.10.0.0/28"}}}), want: 12},
		{name: "multi-pool: the router listed, the health IP not yet", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{{Pool: "default", CIDRs: []string{"10.10.0.0/28"}}}, "10.10.0.1"), want: 12},
		{name: "multi-pool: a pool of one before the agent: 0, not negative", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{{Pool: "default", CIDRs: []string{"10.10.0.7/32"}}}), want: 0},
		{name: "multi-pool: more endpoints listed than the pool holds: negative, invalid (the floor is not taken beyond the pool)", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{{Pool: "default", CIDRs: []string{"10.10.0.0/30"}}},
				"10.10.0.1", "10.10.0.2", "10.10.0.0"), err: "negative: -1"},
		{name: "ENI, v1.20 agent: the first allocation before the agent took its router and health", preset: "cilium-eni",
			obj: ipamtest.CiliumNodeENIMultiPool("n1", "u", 8, 8, 0), want: 6},
		{name: "multi-pool: router and health come out of the default pool", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{
				{Pool: "default", CIDRs: []string{"10.10.0.0/28"}},
			}, "10.10.0.1", "10.10.0.2"), want: 12},
		{name: "multi-pool: router, health and ingress beside an underlay pool", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{
				{Pool: "default", CIDRs: []string{"10.10.0.0/28"}},
				{Pool: "underlay", CIDRs: []string{"10.20.0.16/28"}, AllowFirstIP: true, AllowLastIP: true},
			}, "10.10.0.1", "10.10.0.2", "10.10.0.3"), want: 11},
		{name: "multi-pool: free IPs only in another pool are not the default pool's", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{
				{Pool: "default", CIDRs: []string{"10.10.0.0/28"}},
				{Pool: "storage", CIDRs: []string{"10.30.0.0/27", "10.30.0.32/28"}},
				{Pool: "underlay", CIDRs: []string{"10.20.0.16/28"}, AllowFirstIP: true, AllowLastIP: true},
			}, "10.10.0.1", "10.10.0.2"), want: 12},
		{name: "multi-pool: IPv6 CIDRs and tiny CIDRs", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{
				{Pool: "default", CIDRs: []string{"fd00::/120", "10.10.0.0/31", "10.10.0.2/32", "10.10.1.0/30"}},
			}, "10.10.0.0", "10.10.0.1"), want: 2 + 1 + 2 - 2},
		{name: "multi-pool: a malformed CIDR", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{{Pool: "default", CIDRs: []string{"10.10.0.0/33"}}}),
			err: "network address parse error"},
		{name: "Azure CNS: the assigned IPs less those CNS releases", preset: "azure-cns",
			obj: ipamtest.NodeNetworkConfig("n1", "u", 32, 32, 4), want: 28},
		// CNS serves every address of a static container's primaryIP
		// prefix and, for vnetblock, of each ipAssignment's CIDR
		// (cns/kubecontroller/nodenetworkconfig/conversion_linux.go:19-56;
		// its test expects these 12 for this container).
		{name: "Azure CNS: a static vnetblock container's blocks", preset: "azure-cns",
			obj: ipamtest.NodeNetworkConfigStatic("n1", "u", "vnetblock", "10.224.0.4/30", "10.224.0.8/30", "10.224.0.12/30"), want: 12},
		{name: "Azure CNS: a static overlay container's pod CIDR", preset: "azure-cns",
			obj: ipamtest.NodeNetworkConfigStatic("n1", "u", "overlay", "10.244.3.0/24"), want: 256},
		{name: "Azure CNS: a vnetblock container's IPv6 block is not counted (a pod's IPv4 address is the scarce one)", preset: "azure-cns",
			obj: ipamtest.NodeNetworkConfigStatic("n1", "u", "vnetblock", "10.224.0.16/28", "fd00::/120"), want: 16},
		{name: "Azure CNS v2: names left in ipsNotInUse after a scale-down are not subtracted", preset: "azure-cns",
			obj: ipamtest.NodeNetworkConfig("n1", "u", 16, 16, 0, 16), want: 16},
		{name: "Azure CNS v2: IPs being released and stale names", preset: "azure-cns",
			obj: ipamtest.NodeNetworkConfig("n1", "u", 32, 32, 4, 4), want: 28},
		{name: "Azure CNS: nothing assigned yet", preset: "azure-cns",
			obj: ipamtest.NodeNetworkConfig("n1", "u", 16, 0, 0), want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate(presetSource(t, tc.preset), tc.obj.GetNamespace(), "n1", decoded(t, tc.obj))
			if r.Node != "n1" || r.NodeErr != "" {
				t.Fatalf("node %q (%s), want n1", r.Node, r.NodeErr)
			}
			if tc.err != "" {
				if !strings.Contains(r.Err, tc.err) {
					t.Fatalf("Evaluate = %+v, want an error containing %q", r, tc.err)
				}
				return
			}
			if r.Err != "" || r.Capacity != tc.want {
				t.Fatalf("Evaluate = %+v, want capacity %d", r, tc.want)
			}
		})
	}
}

// TestPresetMaxCapacity: what each preset says the pool may grow to, and
// "does not say" where the object has no such field.
func TestPresetMaxCapacity(t *testing.T) {
	set := func(u *unstructured.Unstructured, v any, path ...string) *unstructured.Unstructured {
		if err := unstructured.SetNestedField(u.Object, v, path...); err != nil {
			t.Fatal(err)
		}
		return u
	}
	tests := []struct {
		name, preset string
		obj          *unstructured.Unstructured
		want         int64
		known        bool
	}{
		{name: "ENI: spec.ipam.max-allocate", preset: "cilium-eni",
			obj: set(ipamtest.CiliumNodeENI("n1", "u", 12, nil), int64(29), "spec", "ipam", "max-allocate"), want: 29, known: true},
		{name: "ENI: no max-allocate, the ENI limit is not on the object", preset: "cilium-eni",
			obj: ipamtest.CiliumNodeENI("n1", "u", 12, nil)},
		{name: "ENI v1.20: the same field", preset: "cilium-eni",
			obj: set(ipamtest.CiliumNodeENIMultiPool("n1", "u", 12, 12, 0), int64(40), "spec", "ipam", "max-allocate"), want: 40, known: true},
		{name: "Azure: the same field", preset: "cilium-azure",
			obj: set(ipamtest.CiliumNodeAzure("n1", "u", 12, nil), int64(0), "spec", "ipam", "max-allocate")},
		{name: "Azure CNS: status.scaler.maxIPCount", preset: "azure-cns",
			obj: set(ipamtest.NodeNetworkConfig("n1", "u", 16, 16, 0), int64(110), "status", "scaler", "maxIPCount"), want: 110, known: true},
		{name: "Azure CNS: capped at 250 as CNS caps its request", preset: "azure-cns",
			obj: set(ipamtest.NodeNetworkConfig("n1", "u", 16, 16, 0), int64(500), "status", "scaler", "maxIPCount"), want: 250, known: true},
		{name: "multi-pool: none", preset: "cilium-multi-pool",
			obj: ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{{Pool: "default", CIDRs: []string{"10.10.0.0/28"}}})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate(presetSource(t, tc.preset), tc.obj.GetNamespace(), "n1", decoded(t, tc.obj))
			if r.Err != "" || r.MaxErr != "" || r.MaxKnown != tc.known || r.MaxCapacity != tc.want {
				t.Fatalf("Evaluate = %+v, want max capacity %d (known %v)", r, tc.want, tc.known)
			}
		})
	}
}

// TestPresetOverride: a source may take a preset's resource and node and
// write its own capacity, e.g. one multi-pool pool.
func TestPresetOverride(t *testing.T) {
	f, err := Decode([]byte(`
sources:
- name: underlay
  preset: cilium-multi-pool
  capacity: >-
    object.spec.ipam.pools.allocated.filter(a, a.pool == "underlay")
      .map(a, a.cidrs.map(c, math.bitShiftLeft(1, 32 - cidr(c).prefixLength())).sum()).sum()
`))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].Resource.String() != "ciliumnodes.cilium.io" || cs[0].Node.Source != "object.metadata.name" {
		t.Errorf("the preset's resource and node were not kept: %+v", cs[0])
	}
	obj := ipamtest.CiliumNodeMultiPool("n1", "u", []ipamtest.PoolAllocation{
		{Pool: "default", CIDRs: []string{"10.10.0.0/24"}},
		{Pool: "underlay", CIDRs: []string{"10.20.0.0/28", "10.20.0.16/28"}, AllowFirstIP: true, AllowLastIP: true},
	})
	if r := Evaluate(cs[0], "", "n1", decoded(t, obj)); r.Err != "" || r.Capacity != 32 {
		t.Errorf("Evaluate = %+v, want 32", r)
	}
}

// nodeSlicePool is a NodeSlicePool as whereabouts v0.9.2's node-slice
// controller writes it (pkg/node-controller/controller.go:363-410: spec.range
// and spec.sliceSize from the network's IPAM configuration, one allocation
// per slice of iphelpers.DivideRangeBySize, nodes assigned to the first free
// slices by assignNodeToSlice, "" for a free one). whereabouts' module is not
// one of capscale's (its Kubernetes libraries are v0.31): the e2e test
// TestRealNodeWhereabouts reads the objects its own controller writes.
func nodeSlicePool(sliceSize string, nodes ...string) map[string]any {
	var allocs []any
	for i := range 4 {
		n := ""
		if i < len(nodes) {
			n = nodes[i]
		}
		allocs = append(allocs, map[string]any{"nodeName": n, "sliceRange": fmt.Sprintf("10.233.7.%d/29", 8*i)})
	}
	return map[string]any{
		"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "NodeSlicePool",
		"metadata": map[string]any{"name": "pods", "namespace": "kube-system"},
		"spec":     map[string]any{"range": "10.233.7.0/24", "sliceSize": sliceSize},
		"status":   map[string]any{"allocations": allocs},
	}
}

// TestPresetWhereaboutsNodeSlice: one NodeSlicePool maps to every node with a
// slice, each with the addresses whereabouts hands out of a slice (its size
// less network and broadcast), and to no node without one.
func TestPresetWhereaboutsNodeSlice(t *testing.T) {
	src := presetSource(t, "whereabouts-node-slice")
	for _, tc := range []struct {
		name, size string
		nodes      []string
		want       int64
		err        string
	}{
		{name: "a /29 holds 6", size: "/29", nodes: []string{"n2", "n1"}, want: 6},
		{name: "without the slash", size: "28", nodes: []string{"n1"}, want: 14},
		{name: "a /31 has no usable address", size: "/31", nodes: []string{"n1"}, want: 0},
		{name: "a /30 holds 2", size: "/30", nodes: []string{"n1"}, want: 2},
		{name: "no node has a slice yet", size: "/29", want: 6},
		{name: "a malformed size", size: "/x", nodes: []string{"n1"}, err: "capacity expression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate(src, "kube-system", "pods", nodeSlicePool(tc.size, tc.nodes...))
			want := slices.Sorted(slices.Values(tc.nodes))
			if r.NodeErr != "" || r.Node != "" || !slices.Equal(r.Nodes, want) {
				t.Fatalf("maps to %q / %q (%s), want %q", r.Node, r.Nodes, r.NodeErr, want)
			}
			if tc.err != "" {
				if !strings.Contains(r.Err, tc.err) {
					t.Fatalf("Evaluate = %+v, want an error containing %q", r, tc.err)
				}
				return
			}
			if r.Err != "" || r.Capacity != tc.want {
				t.Fatalf("Evaluate = %+v, want capacity %d", r, tc.want)
			}
		})
	}
	// The mirror indexes the one object under every node it lists, and
	// each of them gets its count.
	r := Evaluate(src, "kube-system", "pods", nodeSlicePool("/29", "n2", "n1"))
	if got, _ := byNode(&evaluated{Result: r}); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Errorf("indexed under %q, want n1 and n2", got)
	}
	got := Want([]Coverage{{Source: "wb", Resource: "nodeslicepools.whereabouts.cni.cncf.io", Objects: []Result{r}}})
	if got.Value != "6" || got.Origin != "wb nodeslicepools.whereabouts.cni.cncf.io/kube-system/pods" {
		t.Errorf("mirror %+v, want 6 from the NodeSlicePool", got)
	}
}
