package ciliumcheck

import (
	"fmt"
	"net/netip"
	"testing"

	ipamtypes "github.com/cilium/cilium/pkg/ipam/types"
	v2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	nodeaddressing "github.com/cilium/cilium/pkg/node/addressing"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMain(m *testing.M) { Main(m, "..") }

// TestMultiPoolAgent: in multi-pool mode cilium-operator delegates CIDRs
// of each pool to the node in spec.ipam.pools.allocated, first and last
// IPs not allowed unless the pool says so; the agent takes its router,
// health and ingress IPs out of the default pool
// (daemon/infraendpoints/infra_ip_allocation.go:256,352,449,
// ipam.PoolDefault()) and writes them back (nodediscovery.go:332,367,377).
func TestMultiPoolAgent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cidrs []string
		infra int
		pods  int
	}{
		{name: "a /28, router and health", cidrs: []string{"10.20.0.0/28"}, infra: 2},
		{name: "a /28, router, health and ingress, 4 pods", cidrs: []string{"10.20.0.0/28"}, infra: 3, pods: 4},
		{name: "two /27s, router and health", cidrs: []string{"10.20.0.0/27", "10.20.0.32/27"}, infra: 2, pods: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prefixes []netip.Prefix
			for _, c := range tc.cidrs {
				prefixes = append(prefixes, netip.MustParsePrefix(c))
			}
			p := NewPool(prefixes, false)
			cn := &v2.CiliumNode{ObjectMeta: metav1.ObjectMeta{Name: "mp"}}
			cn.Spec.Addresses = []v2.NodeAddress{{Type: nodeaddressing.NodeInternalIP, IP: "10.0.0.10"}}
			for i := range tc.infra {
				a := p.Next(t).String()
				switch i {
				case 0:
					cn.Spec.Addresses = append(cn.Spec.Addresses, v2.NodeAddress{Type: nodeaddressing.NodeCiliumInternalIP, IP: a})
				case 1:
					cn.Spec.HealthAddressing.IPv4 = a
				case 2:
					cn.Spec.IngressAddressing.IPV4 = a
				}
			}
			for range tc.pods {
				p.Next(t)
			}
			cn.Spec.IPAM.Pools.Requested = Demand(tc.infra + tc.pods + 16)
			cn.Spec.IPAM.Pools.Allocated = []ipamtypes.IPAMPoolAllocation{{Pool: "default", CIDRs: p.CIDRs()}}
			Report(t, "cilium-multi-pool", fmt.Sprintf("%v, %d infra, %d pods", tc.cidrs, tc.infra, tc.pods),
				cn, p.Free()+tc.pods)
		})
	}
}
