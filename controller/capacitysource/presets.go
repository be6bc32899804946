package capacitysource

import (
	"fmt"
	"sort"
)

// Presets are capacity sources written for known IPAMs, derived from each
// project's own types and controllers (docs/scheduling.md "Capacity
// sources" cites the file and field each expression reads). A source that
// names one takes its resource, namespace, node and capacity unless it sets
// them itself: a preset is only data for the same mechanism.
var Presets = map[string]Source{
	// Cilium's ENI IPAM (AWS): cilium-operator attaches ENIs and writes
	// their secondary IPs into the CiliumNode's spec.ipam.pool, named after
	// the node; cilium-agent hands pod IPs out of that pool and lists the
	// ones in use in status.ipam.used, with the owner "namespace/pod" for a
	// pod and "router", "health" or "ingress" for its own endpoints
	// (github.com/cilium/cilium pkg/ipam/types/types.go IPAMSpec.Pool,
	// IPAMStatus.Used, ReleaseIPs; daemon/infraendpoints). The node can
	// hold as many pods as the pool has IPs that are neither the agent's
	// own nor being released (status.ipam.release-ips, any state but
	// do-not-release). The operator grows the pool as pods use it (up to
	// the instance's ENI limit or spec.ipam.max-allocate), so the count
	// follows it.
	"cilium-eni": ciliumPool,
	// Cilium's Azure IPAM: the same fields, filled from the VM's Azure
	// interfaces by cilium-operator.
	"cilium-azure": ciliumPool,
	// Cilium's multi-pool IPAM: cilium-operator allocates CIDRs of each
	// pool to the node in spec.ipam.pools.allocated (pool, cidrs,
	// allowFirstIP, allowLastIP); cilium-agent allocates pod IPs out of
	// them, leaving out each CIDR's first and last address unless allowed
	// (pkg/ipam/types IPAMPoolAllocation; pkg/ipam/pool.go and
	// service/ipallocator NewCIDRRange, for CIDRs of more than 2
	// addresses). The count is the IPv4 addresses of every pool's CIDRs;
	// to count one pool (the underlay one), filter on a.pool in your own
	// capacity expression (docs/scheduling.md shows it).
	"cilium-multi-pool": {
		Resource: &Resource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"},
		Node:     "object.metadata.name",
		Capacity: `object.?spec.?ipam.?pools.?allocated.orValue([]).map(a,
  a.?cidrs.orValue([]).filter(c, cidr(c).ip().family() == 4).map(c,
    math.bitShiftLeft(1, 32 - cidr(c).prefixLength())
    - (cidr(c).prefixLength() <= 30 ? (a.?allowFirstIP.orValue(false) ? 0 : 1) + (a.?allowLastIP.orValue(false) ? 0 : 1) : 0)
  ).sum()
).sum()`,
	},
	// Azure CNI with dynamic pod IP allocation, served by Azure CNS: the
	// NodeNetworkConfig kube-system/<node> carries, per network container,
	// the secondary IPs allocated to the node (status.networkContainers[].
	// ipAssignments), from which CNS gives pods their IPs; CNS lists the
	// IPs it is releasing in spec.ipsNotInUse
	// (github.com/Azure/azure-container-networking
	// crd/nodenetworkconfig/api/v1alpha/nodenetworkconfig.go;
	// cns/kubecontroller/nodenetworkconfig/conversion.go
	// CreateNCRequestFromDynamicNC; cns/service/main.go names the object
	// kube-system/<node>). Static (block) network containers are left out.
	"azure-cns": {
		Resource:  &Resource{Group: "acn.azure.com", Version: "v1alpha", Resource: "nodenetworkconfigs"},
		Namespace: "kube-system",
		Node:      "object.metadata.name",
		Capacity: `object.?status.?networkContainers.orValue([])
  .filter(nc, nc.?assignmentMode.orValue("dynamic") == "dynamic")
  .map(nc, size(nc.?ipAssignments.orValue([]))).sum()
- size(object.?spec.?ipsNotInUse.orValue([]))`,
	},
}

var ciliumPool = Source{
	Resource: &Resource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"},
	Node:     "object.metadata.name",
	Capacity: `size(object.?spec.?ipam.?pool.orValue({}))
- object.?status.?ipam.?used.orValue({}).filter(ip,
    !object.status.ipam.used[ip].?owner.orValue("").contains("/")).size()
- object.?status.?ipam[?"release-ips"].orValue({}).filter(ip,
    object.status.ipam["release-ips"][ip] != "do-not-release" && ip in object.?spec.?ipam.?pool.orValue({})).size()`,
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	out := make([]string, 0, len(Presets))
	for n := range Presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Expand returns s with its preset's fields filling the ones it leaves
// empty; an unknown preset is an error.
func (s Source) Expand() (Source, error) {
	if s.Preset == "" {
		return s, nil
	}
	p, ok := Presets[s.Preset]
	if !ok {
		return s, fmt.Errorf("unknown preset %q", s.Preset)
	}
	if s.Resource == nil {
		r := *p.Resource
		s.Resource = &r
		if s.Namespace == "" {
			s.Namespace = p.Namespace
		}
	}
	if s.Node == "" {
		s.Node = p.Node
	}
	if s.Capacity == "" {
		s.Capacity = p.Capacity
	}
	if s.Used == "" {
		s.Used = p.Used
	}
	return s, nil
}
