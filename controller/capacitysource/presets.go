package capacitysource

import (
	"fmt"
	"sort"

	"github.com/capscale/capscale/internal/underlay"
)

// Presets are capacity sources written for known IPAMs, derived from each
// project's own types and controllers, and checked against the objects
// their own code writes (ciliumcheck/ drives Cilium v1.20.2's operator and
// allocators; ipamtest/ builds Azure CNS's objects from ACN v1.8.11's
// source). docs/design/capacity-source-presets.md cites the file and
// field each expression reads. A source that names one takes its resource,
// namespace, node, capacity and maxCapacity unless it sets them itself: a
// preset is only data for the same mechanism.
//
// Capacity is what the node's pool holds now, less what the IPAM keeps for
// itself; MaxCapacity is what the pool may grow to (information only:
// every mode schedules on Capacity, docs/capacity-sources.md says why).
var Presets = map[string]Source{
	// Cilium's ENI IPAM (AWS), agents of v1.19 and of v1.20. cilium-operator
	// attaches ENIs, lists them in status.eni.enis and their secondary IPs
	// in spec.ipam.pool (pkg/ipam/types/types.go:123 IPAMSpec.Pool). What the
	// agent hands out depends on its allocator, told apart as cilium-operator
	// v1.20.2 does (operator/pkg/ipam/nodemanager/node.go:435-455
	// poolRequestedIPs, isMultiPoolNodeLocked): an agent that reports the
	// "default" pool in spec.ipam.pools.requested and has no
	// status.ipam.used runs the multi-pool allocator (v1.20: pkg/ipam/
	// ipam.go:171, eni.go:588-640 reads status.eni.enis into one "default"
	// allocation with first and last IPs allowed, which it writes to
	// spec.ipam.pools.allocated); any other runs the CRD allocator (v1.19),
	// which hands out spec.ipam.pool and lists every IP it gave, with its
	// owner, in status.ipam.used (pkg/ipam/crd.go:526-530). Either way the
	// agent's own endpoints take IPs from the same pool
	// (daemon/infraendpoints/infra_ip_allocation.go:256,352,449: "router",
	// "health", "ingress"): on v1.19 they are status.ipam.used's entries
	// whose owner is not "namespace/pod"; on v1.20 they are the node's
	// CiliumInternalIP, spec.health.ipv4 and spec.ingress.ipv4
	// (pkg/nodediscovery/nodediscovery.go:332,367,377) that fall in the
	// allocated CIDRs. IPs in the release handshake (v1.19 only: the
	// operator leaves multi-pool nodes out of it, node.go:1379-1387) are not
	// for new pods. MaxCapacity is spec.ipam.max-allocate when set
	// (types.go:158; the operator's getMaxAllocate, node.go:303): the
	// instance type's ENI limit it falls back to is in the operator's limits
	// table, not on the CiliumNode.
	"cilium-eni": ciliumCloud,
	// Cilium's Azure IPAM: the same fields, filled from the VM's Azure
	// interfaces by cilium-operator. v1.20.2's agent still runs the CRD
	// allocator in Azure mode (pkg/ipam/ipam.go:192); the expression is
	// cilium-eni's so that an agent moved to multi-pool is read right too.
	"cilium-azure": ciliumCloud,
	// Cilium's multi-pool IPAM: cilium-operator allocates CIDRs of each
	// pool to the node in spec.ipam.pools.allocated (pool, cidrs,
	// allowFirstIP, allowLastIP); cilium-agent allocates pod IPs out of
	// them, leaving out each CIDR's first and last address unless allowed
	// (pkg/ipam/types IPAMPoolAllocation; pkg/ipam/pool.go and
	// service/ipallocator NewCIDRRange, for CIDRs of more than 2
	// addresses). Its router, health and ingress IPs come out of the
	// default pool (infra_ip_allocation.go, ipam.PoolDefault()) and are
	// not for pods. The count is the IPv4 addresses of the default pool's
	// CIDRs less those: the pool every pod that names none draws from
	// (pkg/ipam: ipam.PoolDefault(), the agent's --ipam-default-ip-pool),
	// the pods draws: all charges. Other pools are left out: their free IPs
	// serve only pods that name them. To count another pool (an underlay
	// one, draws: marked), write your own capacity expression filtering on
	// a.pool (docs/capacity-sources.md shows it). No
	// MaxCapacity: a pool grows by CIDRs of its CiliumPodIPPool, with no
	// per-node bound on the CiliumNode.
	"cilium-multi-pool": {
		// The default pool serves every pod that names none; a source
		// counting a separate underlay pool says draws: marked.
		Draws:    underlay.DrawsAll,
		Resource: &Resource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"},
		Node:     "object.metadata.name",
		Capacity: ciliumMultiPool,
	},
	// Azure CNI with dynamic pod IP allocation, served by Azure CNS: the
	// NodeNetworkConfig kube-system/<node> carries, per network container,
	// the secondary IPs allocated to the node (status.networkContainers[].
	// ipAssignments, each named by its ID), from which CNS gives pods their
	// IPs (github.com/Azure/azure-container-networking v1.8.11, the same files at v1.8.12:
	// crd/nodenetworkconfig/api/v1alpha/nodenetworkconfig.go:49-50,86,125,
	// 144; cns/kubecontroller/nodenetworkconfig/conversion.go:70-75
	// CreateNCRequestFromDynamicNC keys each IP by ipAssignment.Name). CNS
	// lists the IDs of the IPs it is releasing in spec.ipsNotInUse: CNS v1
	// rewrites the list from its pending-release IPs and clears it once the
	// controller has reconciled (cns/ipampool/monitor.go:379-412
	// cleanPendingRelease); CNS v2 rewrites it only when it scales
	// (cns/ipampool/v2/monitor.go:145-156 buildNNCSpec, called from
	// reconcile only when the target changes), so names of IPs already gone
	// from status stay listed. The count is the dynamic assignments whose
	// name is not listed. A static network container (assignmentMode
	// static: type overlay, Azure CNI Overlay's pod CIDR, or vnetblock,
	// static block allocation; nodenetworkconfig.go:97-113) is a block CNS
	// serves whole and that does not grow: CNS lists every address of its
	// primaryIP prefix and, for vnetblock, of each ipAssignment's CIDR as
	// the node's pod IPs (cns/kubecontroller/nodenetworkconfig/
	// conversion.go:101-140, conversion_linux.go:19-56), so those IPv4
	// addresses are the count. Leaving it out read 0, and under draws: all
	// no pod could be placed on the node.
	// MaxCapacity is status.scaler.maxIPCount, capped at 250 as CNS caps
	// its request (v2/monitor.go:18,85).
	"azure-cns": {
		// CNS gives every pod-network pod an IP of the node's assignments
		// (cns/ipampool sizes its demand from all of them).
		Draws:     underlay.DrawsAll,
		Resource:  &Resource{Group: "acn.azure.com", Version: "v1alpha", Resource: "nodenetworkconfigs"},
		Namespace: "kube-system",
		Node:      "object.metadata.name",
		Capacity: `object.?status.?networkContainers.orValue([]).map(nc,
  nc.?assignmentMode.orValue("dynamic") == "static"
  ? ([nc.?primaryIP.orValue("")]
     + (nc.?type.orValue("vnet") == "vnetblock" ? nc.?ipAssignments.orValue([]).map(a, a.?ip.orValue("")) : []))
    .filter(c, isCIDR(c) && cidr(c).ip().family() == 4)
    .map(c, math.bitShiftLeft(1, 32 - cidr(c).prefixLength())).sum()
  : nc.?ipAssignments.orValue([])
    .filter(a, !(a.?name.orValue("") in object.?spec.?ipsNotInUse.orValue([]))).size()
).sum()`,
		MaxCapacity: `object.?status.?scaler.?maxIPCount.optFlatMap(m, m > 0 ? optional.of(math.least(m, 250)) : optional.none())`,
	},
	// whereabouts' node slices (v0.9.2, IPv4 only): its node-slice
	// controller divides a network's range into slices of spec.sliceSize
	// and lists which node has which in the NodeSlicePool's
	// status.allocations (nodeName, sliceRange; "" is a free slice)
	// (github.com/k8snetworkplumbingwg/whereabouts
	// pkg/node-controller/controller.go:363-410, 430-456, 601-614;
	// pkg/api/whereabouts.cni.cncf.io/v1alpha1/nodeslicepool_types.go).
	// The CNI plugin hands a node's pods the addresses of its slice less
	// the slice's own network and broadcast addresses, and nothing else:
	// the range's exclude list and range_start/range_end do not apply to a
	// slice, and a slice of 2 addresses or fewer has none
	// (pkg/storage/kubernetes/ipam.go:588-619; pkg/iphelpers/iphelpers.go:
	// 121-143). One object names every node of the network, each with the
	// same count; a node in two networks' pools is invalid (filter on
	// object.metadata.name in your own node expression to pick one). What
	// is in use on the node is in its IPPool (whereaboutsIPPools).
	"whereabouts-node-slice": {
		// As the pod network's IPAM (the bridge's, as on capscale's real
		// nodes) every pod that is not hostNetwork takes an IP of the
		// slice; a whereabouts network that only some pods attach (a
		// Multus secondary network) says draws: marked.
		Draws:    underlay.DrawsAll,
		Resource: &Resource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "nodeslicepools"},
		Node:     `object.?status.?allocations.orValue([]).map(a, a.?nodeName.orValue(""))`,
		Capacity: `int(object.spec.sliceSize.replace("/", "")) <= 30
  ? math.bitShiftLeft(1, 32 - int(object.spec.sliceSize.replace("/", ""))) - 2
  : 0`,
		// What is in use is in each node's IPPool, a second resource.
		UsedFrom: whereaboutsIPPools,
	},
}

// ciliumMultiPool counts the IPv4 addresses of the default pool's CIDRs in
// spec.ipam.pools.allocated, less the agent's router (CiliumInternalIP),
// health and ingress IPs that fall in them. Only the default pool: a pod
// that names no pool (ipam.cilium.io/ip-pool) takes its IP there, and a
// sum over every pool reads a node whose default pool is full as free
// while another pool has room. In ENI mode (status.eni.enis) a v1.20
// agent reads its CIDRs from the ENIs it does not exclude (eni.go:588-640;
// aws/types/types.go:204-216 IsExcludedBySpec) and keeps advertising one
// the ENIs no longer carry while any IP of it is in use, though it hands
// out none of its free IPs (pool.go:313-322, 89-104): such a CIDR is not
// counted. Its pods still are, as pods, so the count is under by their
// IPs until they end, never over. The CIDRs the agent released
// (pool.go:195-258) are not in allocated, and it gives pods none of them
// until its demand takes them back: not counted either. The router and
// health IPs (health on by default) are listed only once the agent took
// them, after the operator's first CIDRs: until then each one not listed
// still comes off, as for a v1.19 agent (ciliumCRD), but never more than
// the pool holds beside what is listed, so an empty pool reads 0.
const ciliumMultiPool = `cel.bind(enis, object.?status.?eni.?enis.orValue({}),
cel.bind(eniSpec, object.?spec.?eni.orValue({}),
cel.bind(carried, enis.filter(k,
      enis[k].?number.orValue(0) >= eniSpec[?"first-interface-index"].orValue(0)
      && !(size(eniSpec[?"exclude-interface-tags"].orValue({})) > 0
        && eniSpec[?"exclude-interface-tags"].orValue({}).all(t,
             enis[k].?tags.orValue({})[?t] == eniSpec[?"exclude-interface-tags"].orValue({})[?t])))
    .map(k, enis[k].?prefixes.orValue([])
      + enis[k].?addresses.orValue([]).filter(x, isIP(x) && ip(x).family() == 4).map(x, x + "/32"))
    .flatten().filter(c, isCIDR(c)).map(c, string(cidr(c))),
cel.bind(allocs, object.?spec.?ipam.?pools.?allocated.orValue([]).filter(a, a.?pool.orValue("") == "default"),
cel.bind(total, allocs.map(a,
    a.?cidrs.orValue([]).filter(c, cidr(c).ip().family() == 4 && (size(enis) == 0 || string(cidr(c)) in carried)).map(c,
      math.bitShiftLeft(1, 32 - cidr(c).prefixLength())
      - (cidr(c).prefixLength() <= 30 ? (a.?allowFirstIP.orValue(false) ? 0 : 1) + (a.?allowLastIP.orValue(false) ? 0 : 1) : 0)
    ).sum()
  ).sum(),
cel.bind(listed, (object.?spec.?addresses.orValue([]).filter(x, x.?type.orValue("") == "CiliumInternalIP").map(x, x.?ip.orValue(""))
     + [object.?spec.?health.?ipv4.orValue(""), object.?spec.?ingress.?ipv4.orValue("")])
    .filter(i, isIP(i) && ip(i).family() == 4
      && allocs.exists(a, a.?cidrs.orValue([]).exists(c, cidr(c).ip().family() == 4
        && (size(enis) == 0 || string(cidr(c)) in carried) && cidr(c).containsIP(i)))).size(),
cel.bind(unlisted,
    (object.?spec.?addresses.orValue([]).exists(x, x.?type.orValue("") == "CiliumInternalIP"
      && isIP(x.?ip.orValue("")) && ip(x.?ip.orValue("")).family() == 4) ? 0 : 1)
  + (isIP(object.?spec.?health.?ipv4.orValue("")) ? 0 : 1),
  total - listed - math.least(unlisted, math.greatest(0, total - listed)))))))))`

// ciliumCRD counts spec.ipam.pool less the agent's own endpoints in
// status.ipam.used (an owner without "/"), at least its router and health
// (on by default) before it lists them: between the operator's first IPs
// and the agent taking those two, a count of the whole pool would let two
// pods too many onto the node (TestKarpenterENIGrowth saw 8 bound on 6),
// and the IPs in the release handshake. The floor is at most the pool, so
// an empty pool reads 0; more endpoints listed than the pool holds is
// still negative, an invalid object.
const ciliumCRD = `size(object.?spec.?ipam.?pool.orValue({}))
- math.greatest(math.least(2, size(object.?spec.?ipam.?pool.orValue({}))), object.?status.?ipam.?used.orValue({}).filter(ip,
    !object.status.ipam.used[ip].?owner.orValue("").contains("/")).size())
- object.?status.?ipam[?"release-ips"].orValue({}).filter(ip,
    object.status.ipam["release-ips"][ip] != "do-not-release" && ip in object.?spec.?ipam.?pool.orValue({})).size()`

var ciliumCloud = Source{
	// Every pod that is not hostNetwork gets its IP from the pool.
	Draws:    underlay.DrawsAll,
	Resource: &Resource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"},
	Node:     "object.metadata.name",
	// The operator's test (node.go:449-455): the agent runs multi-pool.
	Capacity: `object.?spec.?ipam.?pools.?requested.orValue([]).exists(r, r.?pool.orValue("") == "default")
  && size(object.?status.?ipam.?used.orValue({})) == 0
? ` + ciliumMultiPool + `
: ` + ciliumCRD,
	MaxCapacity: `object.?spec.?ipam[?"max-allocate"].optFlatMap(m, m > 0 ? optional.of(m) : optional.none())`,
}

// whereaboutsIPPools is what whereabouts v0.9.2 reports in use on a node:
// the allocations of the node's IPPool, one entry per IP handed out, keyed
// by its offset in spec.range (pkg/storage/kubernetes/ipam.go:186-269
// Update, toAllocationMap; v1alpha1/ippool_types.go IPPoolSpec). The
// IPPool, in the NodeSlicePool's namespace (both are the plugin's
// ipam.Namespace), is the node's alone: it is named
// <network_name>-<node>-<slice>, or <node>-<slice> for a network without
// network_name, with the slice (spec.range) written with "-" for "/" and
// ":" (ipam.go:106-134 IPPoolName, normalizeRange), and made, empty, at
// the node's first pod (ipam.go:136-161). The node expression names every
// tail of what precedes the slice ("pods-node-1" gives pods-node-1, node-1
// and 1: a network name may hold "-" too), which only decides which nodes
// an IPPool's change requeues; the key join (Key, SourceKey) decides which
// IPPools count for a node: those of the source's network.
var whereaboutsIPPools = &UsedFrom{
	Resource: &Resource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "ippools"},
	Node: `cel.bind(suffix, "-" + object.?spec.?range.orValue("").replace("/", "-").replace(":", "-"),
  size(suffix) > 1 && object.metadata.name.endsWith(suffix)
  ? cel.bind(parts, object.metadata.name.substring(0, size(object.metadata.name) - size(suffix)).split("-"),
      lists.range(size(parts)).map(i, parts.slice(i, size(parts)).join("-")))
  : [])`,
	Used: `size(object.?spec.?allocations.orValue({}))`,
	// The join: the plugin allocates a node's pods of a network from the
	// IPPools named <network_name>-<node>-<slice> (ipam.go:587-604,
	// 106-121), and the NodeSlicePool is named network_name, or the
	// configuration's name without one (controller.go:555-561
	// getSliceName, ipam.go:536-541 getNodeSliceName). So an IPPool's key
	// for each node its name may be of is the network part before it
	// ("pods-node-1-<slice>": node-1 -> pods, 1 -> pods-node, and
	// pods-node-1 -> "" as a pool of a network without network_name), and
	// the source's keys are its name and "" (the NodeSlicePool cannot say
	// whether network_name is set; an unnamed network's pool can only
	// over-charge). Another network's IPPool on the node does not count.
	// The per-node part is on the IPPool's side, a handful of tails, not
	// on the NodeSlicePool's, which lists every slice of the network.
	Key: `cel.bind(suffix, "-" + object.?spec.?range.orValue("").replace("/", "-").replace(":", "-"),
  size(suffix) > 1 && object.metadata.name.endsWith(suffix)
  ? cel.bind(parts, object.metadata.name.substring(0, size(object.metadata.name) - size(suffix)).split("-"),
      lists.range(size(parts)).transformMapEntry(i, x, {parts.slice(i, size(parts)).join("-"): parts.slice(0, i).join("-")}))
  : {})`,
	SourceKey: `[string(object.metadata.name), ""]`,
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
	if s.MaxCapacity == "" {
		s.MaxCapacity = p.MaxCapacity
	}
	if s.Draws == "" {
		s.Draws = p.Draws
	}
	if s.Used == "" && s.UsedFrom == nil {
		s.Used = p.Used
		if p.UsedFrom != nil {
			// whereabouts keeps a network's IPPools in its NodeSlicePool's
			// namespace: the source's namespace serves both.
			u := *p.UsedFrom
			r := *u.Resource
			u.Resource = &r
			if u.Namespace == "" {
				u.Namespace = s.Namespace
			}
			s.UsedFrom = &u
		}
	}
	return s, nil
}
