// Package ipamtest builds IPAM objects shaped as each project's own
// controllers write them, for the tests of the capacity-source presets
// (unit and end-to-end): the fields, their names and their nesting are
// those of the project's types, cited on each builder.
package ipamtest

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// ip is the i-th address of 10.<net>.0.0/16.
func ip(net, i int) string { return fmt.Sprintf("10.%d.%d.%d", net, 1+i/250, 4+i%250) }

// ownedByNode is the owner reference cilium-agent (pkg/nodediscovery) and
// Azure CNS give the object: the Node, so that it goes with the Node.
func ownedByNode(node string, uid types.UID) []any {
	if uid == "" {
		return nil
	}
	return []any{map[string]any{"apiVersion": "v1", "kind": "Node", "name": node, "uid": string(uid)}}
}

// ENIName is the one ENI CiliumNodeENI attaches.
const ENIName = "eni-0a1b2c3d4e5f60001"

// CiliumNodeENI is a CiliumNode (cilium.io/v2) in ENI mode
// (github.com/cilium/cilium pkg/k8s/apis/cilium.io/v2 CiliumNode,
// pkg/ipam/types): cilium-operator has attached one ENI and written its
// pool secondary IPs into spec.ipam.pool (each with the ENI as resource)
// and the ENI into status.eni.enis; cilium-agent has taken two of them for
// itself (owners "router" and "health") and one per pod in pods (owner
// "namespace/name") into status.ipam.used. The node can hold pool − 2 pod
// IPs: the capacity the cilium-eni preset gives.
func CiliumNodeENI(node string, uid types.UID, pool int, pods []string) *unstructured.Unstructured {
	const eni = ENIName
	spool := map[string]any{}
	addrs := []any{}
	for i := range pool {
		spool[ip(0, i)] = map[string]any{"resource": eni}
		addrs = append(addrs, ip(0, i))
	}
	used := map[string]any{}
	owners := append([]string{"router", "health"}, pods...)
	for i, o := range owners {
		if i < pool {
			used[ip(0, i)] = map[string]any{"owner": o, "resource": eni}
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2",
		"kind":       "CiliumNode",
		"metadata":   map[string]any{"name": node, "ownerReferences": ownedByNode(node, uid)},
		"spec": map[string]any{
			"addresses":   []any{map[string]any{"type": "InternalIP", "ip": "10.0.0.10"}, map[string]any{"type": "CiliumInternalIP", "ip": ip(0, 0)}},
			"instance-id": "i-0123456789abcdef0",
			"eni": map[string]any{
				"instance-type": "m5.large", "availability-zone": "us-east-1a", "vpc-id": "vpc-0123456789abcdef0",
				"first-interface-index": int64(0), "subnet-ids": []any{"subnet-0123456789abcdef0"},
				"security-groups": []any{"sg-0123456789abcdef0"}, "node-subnet-id": "subnet-0123456789abcdef0",
			},
			"ipam": map[string]any{"pool": spool, "pre-allocate": int64(8)},
		},
		"status": map[string]any{
			"eni": map[string]any{"enis": map[string]any{eni: map[string]any{
				"id": eni, "ip": "10.0.0.10", "mac": "0a:1b:2c:3d:4e:5f", "number": int64(0), "addresses": addrs,
				"subnet": map[string]any{"id": "subnet-0123456789abcdef0", "cidr": "10.0.0.0/16"},
				"vpc":    map[string]any{"id": "vpc-0123456789abcdef0", "primary-cidr": "10.0.0.0/16"},
			}}},
			"ipam": map[string]any{"used": used, "operator-status": map[string]any{}},
		},
	}}
}

// CiliumNodeAzure is a CiliumNode in Azure IPAM mode: cilium-operator has
// written the VM interface's secondary IPs into spec.ipam.pool (resource:
// the interface's ID) and the interface into status.azure.interfaces
// (pkg/azure/types AzureInterface); cilium-agent uses them as in ENI mode.
func CiliumNodeAzure(node string, uid types.UID, pool int, pods []string) *unstructured.Unstructured {
	u := CiliumNodeENI(node, uid, pool, pods)
	const iface = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic-1"
	spec := u.Object["spec"].(map[string]any)
	delete(spec, "eni")
	spec["instance-id"] = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/vmss/virtualMachines/0"
	spec["azure"] = map[string]any{"interface-name": "eth0"}
	addrs := []any{}
	for ipAddr, v := range spec["ipam"].(map[string]any)["pool"].(map[string]any) {
		v.(map[string]any)["resource"] = iface
		addrs = append(addrs, map[string]any{"ip": ipAddr, "state": "succeeded", "subnet": "subnet-1"})
	}
	for _, v := range u.Object["status"].(map[string]any)["ipam"].(map[string]any)["used"].(map[string]any) {
		v.(map[string]any)["resource"] = iface
	}
	st := u.Object["status"].(map[string]any)
	delete(st, "eni")
	st["azure"] = map[string]any{"interfaces": []any{map[string]any{
		"id": iface, "name": "nic-1", "mac": "00-0D-3A-00-00-01", "state": "succeeded", "addresses": addrs,
		"cidr": "10.0.0.0/16", "gateway": "10.0.0.1", "security-group": "nsg-1",
	}}}
	return u
}

// PoolAllocation is one pool's CIDRs on a node in multi-pool mode.
type PoolAllocation struct {
	Pool                      string
	CIDRs                     []string
	AllowFirstIP, AllowLastIP bool
}

// CiliumNodeMultiPool is a CiliumNode in multi-pool IPAM mode:
// cilium-agent asks for IPs per pool in spec.ipam.pools.requested and
// cilium-operator allocates CIDRs of each pool in spec.ipam.pools.allocated
// (pkg/ipam/types IPAMPoolSpec, IPAMPoolAllocation). Without infra, the
// agent's own endpoints have no IPs yet; with it, they are the router
// (spec.addresses' CiliumInternalIP), health and ingress IPs the agent
// took from the default pool and wrote back (Cilium v1.20.2
// daemon/infraendpoints/infra_ip_allocation.go:256,352,449;
// pkg/nodediscovery/nodediscovery.go:332,367,377).
func CiliumNodeMultiPool(node string, uid types.UID, pools []PoolAllocation, infra ...string) *unstructured.Unstructured {
	var requested, allocated []any
	for _, p := range pools {
		requested = append(requested, map[string]any{"pool": p.Pool, "needed": map[string]any{"ipv4-addrs": int64(16)}})
		cidrs := make([]any, len(p.CIDRs))
		for i, c := range p.CIDRs {
			cidrs[i] = c
		}
		a := map[string]any{"pool": p.Pool, "cidrs": cidrs}
		if p.AllowFirstIP {
			a["allowFirstIP"] = true
		}
		if p.AllowLastIP {
			a["allowLastIP"] = true
		}
		allocated = append(allocated, a)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2",
		"kind":       "CiliumNode",
		"metadata":   map[string]any{"name": node, "ownerReferences": ownedByNode(node, uid)},
		"spec": withInfra(map[string]any{
			"addresses": []any{map[string]any{"type": "InternalIP", "ip": "10.0.0.10"}},
			"ipam":      map[string]any{"pools": map[string]any{"requested": requested, "allocated": allocated}},
		}, infra),
	}}
}

// withInfra writes the agent's router, health and ingress IPs (in that
// order, as many as given) into spec as cilium-agent's node discovery does.
func withInfra(spec map[string]any, infra []string) map[string]any {
	for i, a := range infra {
		switch i {
		case 0:
			spec["addresses"] = append(spec["addresses"].([]any), map[string]any{"type": "CiliumInternalIP", "ip": a})
		case 1:
			spec["health"] = map[string]any{"ipv4": a}
		case 2:
			spec["ingress"] = map[string]any{"ipv4": a}
		}
	}
	return spec
}

// CiliumNodeENIMultiPool is a CiliumNode of a v1.20 agent in ENI mode, which
// runs the multi-pool allocator (Cilium v1.20.2 pkg/ipam/ipam.go:171): the
// operator's spec.ipam.pool and status.eni.enis as CiliumNodeENI writes
// them; the agent has turned the ENI's addresses into /32 CIDRs of the
// "default" pool with first and last IPs allowed in
// spec.ipam.pools.allocated (pkg/ipam/eni.go:588-640), taken its router,
// health and ingress IPs out of them (infra), reported its demand (in use
// plus pre-allocate 8) in spec.ipam.pools.requested and written nothing
// into status.ipam.used (the operator's test of a multi-pool agent,
// operator/pkg/ipam/nodemanager/node.go:449-455). allocated may be fewer
// than pool: the agent's pools can lag the ENIs (cilium#47910).
func CiliumNodeENIMultiPool(node string, uid types.UID, pool, allocated, inUse int, infra ...string) *unstructured.Unstructured {
	u := CiliumNodeENI(node, uid, pool, nil)
	cidrs := make([]any, 0, allocated)
	for i := range allocated {
		cidrs = append(cidrs, ip(0, i)+"/32")
	}
	spec := u.Object["spec"].(map[string]any)
	spec["ipam"].(map[string]any)["pools"] = map[string]any{
		"requested": []any{map[string]any{"pool": "default", "needed": map[string]any{"ipv4-addrs": int64(inUse + 8)}}},
		"allocated": []any{map[string]any{"pool": "default", "cidrs": cidrs, "allowFirstIP": true, "allowLastIP": true}},
	}
	spec["addresses"] = []any{map[string]any{"type": "InternalIP", "ip": "10.0.0.10"}}
	withInfra(spec, infra)
	delete(u.Object["status"].(map[string]any)["ipam"].(map[string]any), "used")
	return u
}

// IP is the i-th address of the pools the CiliumNode builders write: for
// naming the agent's own endpoints in them.
func IP(i int) string { return ip(0, i) }

// NodeNetworkConfig is an Azure CNS NodeNetworkConfig (acn.azure.com/
// v1alpha, kube-system/<node>; github.com/Azure/azure-container-networking
// crd/nodenetworkconfig/api/v1alpha) of a node with dynamic pod IP
// allocation: CNS has asked for requested IPs in spec.requestedIPCount,
// and the delegated network controller has assigned ips secondary IPs to
// one dynamic VNET network container in status; CNS is releasing the
// first notInUse of them (spec.ipsNotInUse holds their IDs, the
// assignments' names: ACN v1.8.11 cns/ipampool/v2/monitor.go:145-156
// buildNNCSpec, cns/kubecontroller/nodenetworkconfig/conversion.go:70-75).
// stale more names follow in spec.ipsNotInUse, of IPs the controller has
// already taken out of status: CNS v2 rewrites the list only when its
// target changes (v2/monitor.go:112-142 reconcile), so after a scale-down the names
// stay until the next scale.
func NodeNetworkConfig(node string, uid types.UID, requested, ips, notInUse int, stale ...int) *unstructured.Unstructured {
	assignments := make([]any, ips)
	var releasing []any
	id := func(i int) string { return fmt.Sprintf("f0a1b2c3-0000-4000-8000-%012d", i) }
	for i := range ips {
		assignments[i] = map[string]any{"name": id(i), "ip": ip(240, i)}
		if i < notInUse {
			releasing = append(releasing, id(i))
		}
	}
	for _, n := range stale {
		for i := range n {
			releasing = append(releasing, id(ips+i))
		}
	}
	spec := map[string]any{"requestedIPCount": int64(requested), "availabilityZone": int64(1)}
	if len(releasing) > 0 {
		spec["ipsNotInUse"] = releasing
	}
	return nodeNetworkConfig(node, uid, spec, map[string]any{
		"assignedIPCount": int64(ips),
		"status":          "Updated",
		"scaler":          map[string]any{"batchSize": int64(16), "releaseThresholdPercent": int64(150), "requestThresholdPercent": int64(50), "maxIPCount": int64(250)},
		"networkContainers": []any{map[string]any{
			"id": "d9a5b0f2-5a8e-4e47-8a9b-6c1f3a2e9b10", "assignmentMode": "dynamic", "type": "vnet",
			"primaryIP": "10.240.0.4", "subnetName": "pods", "subnetAddressSpace": "10.240.0.0/16",
			"defaultGateway": "10.240.0.1", "nodeIP": "10.224.0.4", "version": int64(1), "status": "NCUpdateSuccess",
			"subnetID": "pods", "vnetID": "vnet-1", "subcriptionID": "s", "resourceGroupID": "rg",
			"ipAssignments": assignments,
		}},
	})
}

// NodeNetworkConfigStatic is an Azure CNS NodeNetworkConfig of a node whose
// pods take their IPs from one static network container (assignmentMode
// static, ACN v1.8.12 crd/nodenetworkconfig/api/v1alpha/
// nodenetworkconfig.go:97-113): ncType "overlay" (Azure CNI Overlay: the
// node's pod CIDR in primaryIP) or "vnetblock" (static block allocation:
// the node's first block in primaryIP, more blocks as ipAssignments'
// CIDRs), shaped as ACN's own tests write them
// (cns/kubecontroller/nodenetworkconfig/conversion_test.go:20-28, 91-120).
// A static container has no scaler: it does not grow.
func NodeNetworkConfigStatic(node string, uid types.UID, ncType, primaryIP string, blocks ...string) *unstructured.Unstructured {
	assignments := make([]any, len(blocks))
	for i, b := range blocks {
		assignments[i] = map[string]any{"name": fmt.Sprintf("f0a1b2c3-0000-4000-8000-%012d", i), "ip": b}
	}
	nc := map[string]any{
		"id": "d9a5b0f2-5a8e-4e47-8a9b-6c1f3a2e9b10", "assignmentMode": "static", "type": ncType,
		"primaryIP": primaryIP, "subnetName": "pods", "subnetAddressSpace": "10.224.0.0/14",
		"defaultGateway": "10.224.0.1", "nodeIP": "10.228.0.6", "version": int64(1), "status": "NCUpdateSuccess",
	}
	if len(blocks) > 0 {
		nc["ipAssignments"] = assignments
	}
	return nodeNetworkConfig(node, uid, map[string]any{"requestedIPCount": int64(0)},
		map[string]any{"assignedIPCount": int64(0), "status": "Updated", "networkContainers": []any{nc}})
}

// nodeNetworkConfig is node's NodeNetworkConfig, owned by its Node as CNS's
// controller writes it, with spec and status.
func nodeNetworkConfig(node string, uid types.UID, spec, status map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "acn.azure.com/v1alpha",
		"kind":       "NodeNetworkConfig",
		"metadata":   map[string]any{"name": node, "namespace": "kube-system", "ownerReferences": ownedByNode(node, uid)},
		"spec":       spec,
		"status":     status,
	}}
}
