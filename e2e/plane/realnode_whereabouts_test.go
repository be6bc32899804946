package plane

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestWhereaboutsSliceBits(t *testing.T) {
	for capacity, want := range map[int]int{2: 2, 6: 3, 14: 4, 30: 5, 62: 6, 126: 7} {
		if got, err := whereaboutsSliceBits(capacity); err != nil || got != want {
			t.Errorf("capacity %d: %d host bits, %v; want %d", capacity, got, err, want)
		}
	}
	for _, capacity := range []int{0, 1, 3, 8, 10, 254} {
		if _, err := whereaboutsSliceBits(capacity); err == nil || !strings.Contains(err.Error(), "2^n-2") {
			t.Errorf("capacity %d: %v, want an error naming the sizes", capacity, err)
		}
	}
}

// TestWhereaboutsOptions: what whereabouts real nodes cannot honour is
// refused before anything starts, never dropped.
func TestWhereaboutsOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		err  string
	}{
		{name: "host-local by default", o: Options{RealNodes: 2}},
		{name: "whereabouts", o: Options{RealNodes: 2, Nodes: 1, IPAM: IPAMWhereabouts}},
		{name: "unknown IPAM", o: Options{RealNodes: 1, IPAM: "calico"}, err: `unknown IPAM "calico"`},
		{name: "no real nodes", o: Options{IPAM: IPAMWhereabouts}, err: "needs real nodes"},
		{name: "per-node capacities", o: Options{RealNodes: 2, IPAM: IPAMWhereabouts, RealNodeCapacities: []int{6, 14}}, err: "same size"},
		{name: "whereabouts with the service network", o: Options{RealNodes: 1, IPAM: IPAMWhereabouts, ServiceNetwork: true}},
		{name: "a capacity no slice holds", o: Options{RealNodes: 1, IPAM: IPAMWhereabouts, RealNodeCapacity: 10}, err: "2^n-2"},
		{name: "more nodes than slices", o: Options{RealNodes: 2, Nodes: 1, IPAM: IPAMWhereabouts, RealNodeCapacity: 126}, err: "gives 2 slices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkRealNodeOptions(tc.o)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("checkRealNodeOptions = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestWhereaboutsNames(t *testing.T) {
	wb := &whereaboutsNet{Name: "capscale-ab12", Range: netip.MustParsePrefix("10.233.5.0/24"), SliceBits: 3}
	if got := wb.gateway(1).String(); got != "10.233.5.253" {
		t.Errorf("gateway(1) = %s", got)
	}
	slice := netip.MustParsePrefix("10.233.5.8/29")
	if got := lastAddr(slice).String(); got != "10.233.5.15" {
		t.Errorf("lastAddr = %s", got)
	}
	if got := wb.ipPoolName("real-node-0", slice); got != "capscale-ab12-real-node-0-10.233.5.8-29" {
		t.Errorf("ipPoolName = %s", got)
	}
	if _, ok := wb.ipam(netip.Addr{}, "", false)["routes"]; ok {
		t.Errorf("routes without the service network")
	}
	if got := wb.ipam(netip.MustParseAddr("10.233.5.254"), "", true)["routes"]; fmt.Sprint(got) != fmt.Sprint(serviceRoutes()) {
		t.Errorf("routes with the service network = %v, want %v", got, serviceRoutes())
	}
	if got := wb.ipam(netip.Addr{}, "", false)["node_slice_size"]; got != "/29" {
		t.Errorf("node_slice_size = %v", got)
	}
}
