// Package eni checks capscale's cilium-eni and cilium-azure presets on
// CiliumNodes written by cilium-operator v1.20.2's ENI IPAM against
// Cilium's mock EC2 API, for a v1.19-style and a v1.20-style agent.
package eni

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	metricsmock "github.com/cilium/cilium/operator/pkg/ipam/metrics/mock"
	"github.com/cilium/cilium/operator/pkg/ipam/nodemanager"
	apimock "github.com/cilium/cilium/pkg/aws/api/mock"
	eniipam "github.com/cilium/cilium/pkg/aws/ipam"
	metadatamock "github.com/cilium/cilium/pkg/aws/metadata/mock"
	awstypes "github.com/cilium/cilium/pkg/aws/types"
	iputil "github.com/cilium/cilium/pkg/ip"
	ipamtypes "github.com/cilium/cilium/pkg/ipam/types"
	v2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	nodeaddressing "github.com/cilium/cilium/pkg/node/addressing"
	"github.com/cilium/hive/hivetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/controller/capacitysource/ciliumcheck"
)

func TestMain(m *testing.M) { ciliumcheck.Main(m, filepath.Join("..", "..")) }

// capture is the operator's CiliumNode client: it keeps what the operator
// writes (cilium-operator's syncToAPIServer updates status, then spec).
type capture struct {
	mu   sync.Mutex
	last *v2.CiliumNode
}

func (c *capture) keep(n *v2.CiliumNode) (*v2.CiliumNode, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = n.DeepCopy()
	return n, nil
}
func (c *capture) Create(n *v2.CiliumNode) (*v2.CiliumNode, error)          { return c.keep(n) }
func (c *capture) Update(_, n *v2.CiliumNode) (*v2.CiliumNode, error)       { return c.keep(n) }
func (c *capture) UpdateStatus(_, n *v2.CiliumNode) (*v2.CiliumNode, error) { return c.keep(n) }
func (c *capture) Get(string) (*v2.CiliumNode, error)                       { return &v2.CiliumNode{}, nil }

// reset forgets what was written, so that sync waits for a new write.
func (c *capture) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = nil
}

func (c *capture) written() *v2.CiliumNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		return nil
	}
	return c.last.DeepCopy()
}

// operator is cilium-operator's ENI IPAM for one m5.large instance with
// one ENI attached, against Cilium's mock EC2 API.
type operator struct {
	mngr      *nodemanager.NodeManager
	k8s       *capture
	ec2       *apimock.API
	instances *eniipam.InstancesManager
	eni       string
}

const instanceID = "i-capscale-0"

func newOperator(t *testing.T) *operator { return newOperatorWith(t, false) }

// newOperatorWith is newOperator with prefix delegation on or off: on, the
// operator gives the ENI /28 prefixes rather than secondary IPs.
func newOperatorWith(t *testing.T, prefixDelegation bool) *operator {
	t.Helper()
	subnet := &ipamtypes.Subnet{ID: "s-1", AvailabilityZone: "us-west-1", VirtualNetworkID: "vpc-1", AvailableAddresses: 200}
	vpc := &ipamtypes.VirtualNetwork{ID: "vpc-1", PrimaryCIDR: iputil.PrefixFrom(netip.MustParsePrefix("10.10.0.0/16"))}
	ec2 := apimock.NewAPI([]*ipamtypes.Subnet{subnet}, []*ipamtypes.VirtualNetwork{vpc}, []*awstypes.SecurityGroup{{ID: "sg-1", VpcID: "vpc-1"}}, nil)
	meta, err := metadatamock.NewMetadataMock()
	if err != nil {
		t.Fatal(err)
	}
	instances, err := eniipam.NewInstancesManager(t.Context(), hivetest.Logger(t), ec2, meta)
	if err != nil {
		t.Fatal(err)
	}
	eni, _, err := ec2.CreateNetworkInterface(t.Context(), 0, "s-1", "capscale", []string{"sg-1"}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ec2.AttachNetworkInterface(t.Context(), 0, instanceID, eni); err != nil {
		t.Fatal(err)
	}
	if _, err := instances.Resync(t.Context()); err != nil {
		t.Fatal(err)
	}
	k := &capture{}
	mngr, err := nodemanager.NewNodeManager(hivetest.Logger(t), instances, k, metricsmock.NewMockMetrics(), 10, false, 0, prefixDelegation)
	if err != nil {
		t.Fatal(err)
	}
	return &operator{mngr: mngr, k8s: k, ec2: ec2, instances: instances, eni: eni}
}

// unassignPrefix takes a delegated prefix off the ENI in the mock EC2, as
// EC2's UnassignPrivateIpAddresses with its prefix does: the mock's own
// call frees the prefix's addresses but leaves it in the ENI's prefix
// list, which is dropped here too.
func (o *operator) unassignPrefix(t *testing.T, prefix netip.Prefix) {
	t.Helper()
	if err := o.ec2.UnassignENIPrefixes(t.Context(), o.eni, []string{prefix.String()}); err != nil {
		t.Fatal(err)
	}
	inst, err := o.ec2.GetInstance(t.Context(), nil, nil, instanceID)
	if err != nil {
		t.Fatal(err)
	}
	enis := apimock.ENIMap{}
	for id, iface := range inst.Interfaces {
		e, ok := iface.(*awstypes.ENI)
		if !ok {
			t.Fatalf("interface %s is a %T", id, iface)
		}
		var kept []iputil.Prefix
		for _, p := range e.Prefixes {
			if p.Prefix != prefix {
				kept = append(kept, p)
			}
		}
		e.Prefixes = kept
		enis[id] = e
	}
	o.ec2.UpdateENIs(map[string]apimock.ENIMap{instanceID: enis})
}

// sync hands the operator the agent's CiliumNode and waits until it has
// met the node's demand and written the result; it returns the
// CiliumNode as the operator wrote it.
func (o *operator) sync(t *testing.T, cn *v2.CiliumNode) *v2.CiliumNode {
	t.Helper()
	o.mngr.Upsert(cn.DeepCopy())
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n := o.mngr.Get(cn.Name)
		if w := o.k8s.written(); n != nil && n.GetNeededAddresses() == 0 && w != nil &&
			len(w.Spec.IPAM.Pool) == n.Stats().IPv4.AvailableIPs && len(w.Status.ENI.ENIs) > 0 {
			return w
		}
		time.Sleep(20 * time.Millisecond)
	}
	n, w := o.mngr.Get(cn.Name), o.k8s.written()
	if n == nil || w == nil {
		t.Fatalf("the operator did not settle node %s: node %v, written %v", cn.Name, n != nil, w != nil)
	}
	t.Fatalf("the operator did not settle node %s: needs %d more, pool %d, available %d, ENIs %d",
		cn.Name, n.GetNeededAddresses(), len(w.Spec.IPAM.Pool), n.Stats().IPv4.AvailableIPs, len(w.Status.ENI.ENIs))
	return nil
}

// newCiliumNode is the CiliumNode cilium-agent creates in ENI mode
// (pkg/nodediscovery: instance ID and type, first-interface-index, the
// agent's pre-allocate).
func newCiliumNode(name string) *v2.CiliumNode {
	first := 0
	return &v2.CiliumNode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v2.NodeSpec{
			InstanceID: instanceID,
			ENI:        awstypes.ENISpec{InstanceType: "m5.large", FirstInterfaceIndex: &first, AvailabilityZone: "us-west-1", VpcID: "vpc-1"},
			IPAM:       ipamtypes.IPAMSpec{PreAllocate: 8},
		},
	}
}

// TestENIAgentV119: a v1.19-style agent runs the CRD allocator: it hands
// pods the IPs of the operator's spec.ipam.pool and lists each IP it gave,
// its own router and health first, in status.ipam.used with the owner
// (Cilium v1.20.2 pkg/ipam/crd.go:526-530, which v1.20.2 still runs in
// Azure and CRD modes; daemon/infraendpoints/infra_ip_allocation.go).
func TestENIAgentV119(t *testing.T) {
	op := newOperator(t)
	w := op.sync(t, newCiliumNode("n119"))
	const pods = 5
	owners := []string{"router", "health"}
	for i := range pods {
		owners = append(owners, fmt.Sprintf("shop/web-%d", i))
	}
	w.Status.IPAM.Used = ipamtypes.AllocationMap{}
	for i, ip := range sortedIPs(w.Spec.IPAM.Pool)[:len(owners)] {
		w.Status.IPAM.Used[ip] = ipamtypes.AllocationIP{Owner: owners[i], Resource: w.Spec.IPAM.Pool[ip].Resource}
	}
	// The operator grows the pool to keep pre-allocate IPs free.
	w = op.sync(t, w)
	n := op.mngr.Get(w.Name).Stats().IPv4
	if n.UsedIPs != len(owners) {
		t.Fatalf("the operator counts %d used IPs, want %d (a CRD-allocator agent)", n.UsedIPs, len(owners))
	}
	// The CRD allocator can give pods every pool IP its own endpoints do
	// not hold: the operator's count of the pool less router and health.
	ciliumcheck.Report(t, "cilium-eni", fmt.Sprintf("v1.19 agent, %d pods, pool %d", pods, n.AvailableIPs), w, n.AvailableIPs-2)
}

// TestENIAgentV120: a v1.20 agent runs the multi-pool allocator in ENI
// mode. It reads status.eni.enis into CIDRs of the "default" pool, first
// and last IPs allowed (pkg/ipam/eni.go:588-640), allocates its router and
// health IPs and its pods' out of them, writes the CIDRs to
// spec.ipam.pools.allocated and its demand (in use plus pre-allocate,
// multipool_manager.go:565) to spec.ipam.pools.requested, and clears
// status.ipam.used (multipool_manager.go:726-745). The operator sees a
// multi-pool agent (operator/pkg/ipam/nodemanager/node.go:449-455) and
// sizes the ENIs from the demand.
func TestENIAgentV120(t *testing.T) {
	op := newOperator(t)
	cn := newCiliumNode("n120")
	cn.Spec.IPAM.Pools.Requested = ciliumcheck.Demand(8)
	w := op.sync(t, cn)

	p := ciliumcheck.NewPool(eniCIDRs(w), true)
	router, health := p.Next(t), p.Next(t)
	const pods = 5
	for range pods {
		p.Next(t)
	}
	agentWrites(w, p, router, health, 2+pods)
	ciliumcheck.Report(t, "cilium-eni", fmt.Sprintf("v1.20 agent, %d pods, allocated %d", pods, len(p.Ranges)), w, p.Free()+pods)
	ciliumcheck.Report(t, "cilium-azure", fmt.Sprintf("v1.20 agent (ENI objects), %d pods", pods), w, p.Free()+pods)

	// Demand grows: the operator attaches more IPs to the ENIs before the
	// agent has read them (cilium#47910: spec.ipam.pool ahead of
	// spec.ipam.pools.allocated). The agent can still give only what its
	// own pool holds.
	w.Spec.IPAM.Pools.Requested = ciliumcheck.Demand(2 + pods + 8 + 6)
	grown := op.sync(t, w)
	if len(grown.Spec.IPAM.Pool) <= len(p.Ranges) {
		t.Fatalf("the operator did not grow the pool: %d IPs for %d allocated", len(grown.Spec.IPAM.Pool), len(p.Ranges))
	}
	agentWrites(grown, p, router, health, 2+pods)
	lagging := grown.DeepCopy()
	ciliumcheck.Report(t, "cilium-eni", fmt.Sprintf("v1.20 agent, pool %d ahead of allocated %d", len(grown.Spec.IPAM.Pool), len(p.Ranges)),
		lagging, p.Free()+pods)

	// The agent reads the new ENI addresses: its pool catches up.
	caughtUp := ciliumcheck.NewPool(eniCIDRs(grown), true)
	for _, a := range p.Allocated() { // router, health and the pods
		for _, r := range caughtUp.Ranges {
			if r.CIDR().Contains(a) {
				if err := r.Allocate(a); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	agentWrites(grown, caughtUp, router, health, 2+pods)
	ciliumcheck.Report(t, "cilium-eni", fmt.Sprintf("v1.20 agent, allocated caught up (%d)", len(caughtUp.Ranges)), grown, caughtUp.Free()+pods)
}

// TestENIAgentV120Release: pods end and the v1.20 agent gives back the
// CIDRs it no longer needs (ReleaseExcess: pool.go:195-258), advertising
// only the rest in spec.ipam.pools.allocated. status.eni.enis still holds
// every address (the operator releases none here), and the agent takes
// the released ones back only once its demand outgrows what it kept
// (pool.go:213-238): until then it gives pods what allocated lists, no
// more, which is what the preset counts.
func TestENIAgentV120Release(t *testing.T) {
	op := newOperator(t)
	cn := newCiliumNode("n120r")
	cn.Spec.IPAM.Pools.Requested = ciliumcheck.Demand(2 + 12 + 8)
	w := op.sync(t, cn)
	p := ciliumcheck.NewPool(eniCIDRs(w), true)
	router, health := p.Next(t), p.Next(t)
	var pods []netip.Addr
	for range 12 {
		pods = append(pods, p.Next(t))
	}
	// Eleven pods end: their IPs go back to their ranges.
	for _, a := range pods[1:] {
		for _, r := range p.Ranges {
			if r.CIDR().Contains(a) {
				r.Release(a)
			}
		}
	}
	before := len(p.Ranges)
	p.ReleaseExcess(8) // linear demand: in use plus the pre-allocate (eni.go:749)
	if len(p.Ranges) >= before {
		t.Fatalf("the agent released nothing: %d CIDRs before and after", before)
	}
	agentWrites(w, p, router, health, 2+1)
	ciliumcheck.Report(t, "cilium-eni", fmt.Sprintf("v1.20 agent, 1 pod, released to %d of %d", len(p.Ranges), before), w, p.Free()+1)
}

// TestENIAgentV120RemovedPrefix: with prefix delegation the ENI holds /28
// prefixes. One that holds pods' IPs leaves the ENI (unassigned in EC2,
// here through Cilium's mock EC2 API, and written out of status.eni by
// the operator). The v1.20 agent keeps that CIDR for the IPs in use and
// advertises it in spec.ipam.pools.allocated still, but hands out none of
// its free IPs (pool.go:313-322 updatePool marks it removed, 89-104
// allocateNext skips it). The preset counts a CIDR only while an ENI
// carries it; the removed prefix's pods are still charged as pods, so the
// count is under what the agent can give by those pods' IPs, never over.
func TestENIAgentV120RemovedPrefix(t *testing.T) {
	op := newOperatorWith(t, true)
	cn := newCiliumNode("n120p")
	cn.Spec.IPAM.Pools.Requested = ciliumcheck.Demand(2 + 5 + 8)
	w := op.sync(t, cn)
	var prefixes []string
	for _, e := range w.Status.ENI.ENIs {
		for _, pf := range e.Prefixes {
			prefixes = append(prefixes, pf.String())
		}
	}
	if len(prefixes) == 0 {
		t.Fatalf("the operator delegated no prefix: %+v", w.Status.ENI)
	}
	p := ciliumcheck.NewPool(eniCIDRs(w), true)
	router, health := p.Next(t), p.Next(t)
	const pods = 5
	for range pods {
		p.Next(t)
	}
	inUse := p.Ranges[0].CIDR() // router, health and the pods are all here
	op.unassignPrefix(t, inUse)
	synced, err := op.instances.Resync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	op.mngr.Resync(t.Context(), synced)
	agentWrites(w, p, router, health, 2+pods)
	op.k8s.reset()
	w = op.sync(t, w)
	p.Update(eniCIDRs(w), true)
	if !p.Removed[inUse] {
		t.Fatalf("the agent did not keep %s as removed: %v (ENI CIDRs now %v)", inUse, p.Removed, eniCIDRs(w))
	}
	agentWrites(w, p, router, health, 2+pods)
	// Router, health and the pods hold IPs of the removed prefix: what the
	// agent can give pods is the other CIDRs' free IPs, and the preset is
	// under that by the pods' IPs in the removed prefix (the object does
	// not say which IPs are in use).
	ciliumcheck.ReportUnder(t, "cilium-eni", fmt.Sprintf("v1.20 agent, in-use prefix removed, %d pods in it", pods), w, p.Free()+pods, pods,
		"the pods' IPs in the removed prefix: the object lists the prefix but not which of its IPs are in use")
}

// eniCIDRs is what a v1.20 agent makes of status.eni.enis
// (pkg/ipam/eni.go:588-640, eniPoolAccessor.FromResource, unexported):
// the ENIs the spec does not exclude, each delegated prefix as is and each
// address no prefix covers as a /32.
func eniCIDRs(cn *v2.CiliumNode) []netip.Prefix {
	var out []netip.Prefix
	for _, e := range cn.Status.ENI.ENIs {
		if e.IsExcludedBySpec(cn.Spec.ENI) {
			continue
		}
		var prefixes []netip.Prefix
		for _, p := range e.Prefixes {
			out = append(out, p.Prefix)
			prefixes = append(prefixes, p.Prefix)
		}
	addrs:
		for _, a := range e.Addresses {
			for _, p := range prefixes {
				if p.Contains(a.Addr) {
					continue addrs
				}
			}
			out = append(out, netip.PrefixFrom(a.Addr, a.BitLen()))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr().Less(out[j].Addr()) })
	return out
}

// agentWrites writes into cn what a v1.20 agent writes: its pool's CIDRs
// in spec.ipam.pools.allocated, its demand, its router (CiliumInternalIP)
// and health IPs (pkg/nodediscovery/nodediscovery.go:332,367), and no
// status.ipam.used.
func agentWrites(cn *v2.CiliumNode, p *ciliumcheck.Pool, router, health netip.Addr, inUse int) {
	cn.Spec.IPAM.Pools.Allocated = []ipamtypes.IPAMPoolAllocation{{Pool: "default", AllowFirstIP: true, AllowLastIP: true, CIDRs: p.CIDRs()}}
	cn.Spec.IPAM.Pools.Requested = ciliumcheck.Demand(inUse + 8)
	cn.Spec.Addresses = []v2.NodeAddress{{Type: nodeaddressing.NodeInternalIP, IP: "10.0.0.10"}, {Type: nodeaddressing.NodeCiliumInternalIP, IP: router.String()}}
	cn.Spec.HealthAddressing.IPv4 = health.String()
	cn.Status.IPAM.Used = nil
}

func sortedIPs(m ipamtypes.AllocationMap) []string {
	out := make([]string, 0, len(m))
	for ip := range m {
		out = append(out, ip)
	}
	sort.Slice(out, func(i, j int) bool {
		return netip.MustParseAddr(out[i]).Less(netip.MustParseAddr(out[j]))
	})
	return out
}
