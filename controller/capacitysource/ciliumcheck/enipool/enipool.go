// Package enipool grows each Node's ENI pool with cilium-operator v1.20.2's
// own ENI IPAM (operator/pkg/ipam/nodemanager, pkg/aws/ipam) against
// Cilium's mock EC2 API, on a live apiserver, for the end-to-end tests of
// Karpenter with a pool that grows (issue 55 §4). Each Node is an m5.large
// with its first ENI attached; a v1.19-style agent (the CRD allocator,
// Cilium v1.20.2 pkg/ipam/crd.go) stands beside the operator: it creates
// the node's CiliumNode with spec.ipam.pre-allocate, gives its router and
// health endpoints and each pod bound to the node an IP of spec.ipam.pool,
// and lists them in status.ipam.used. The operator keeps pre-allocate IPs
// free, so the pool grows as pods land, up to the instance's ENI limit
// (3 ENIs of 10 addresses, less each ENI's primary: 27; 25 for pods).
package enipool

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"sync"
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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// InstanceType is every node's EC2 instance type in the mock.
const InstanceType = "m5.large"

var ciliumNodes = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"}

// Grower runs the operator and one agent per Node.
type Grower struct {
	core      kubernetes.Interface
	dyn       dynamic.Interface
	log       *slog.Logger
	ec2       *apimock.API
	instances *eniipam.InstancesManager
	mngr      *nodemanager.NodeManager
	// PreAllocate is each agent's spec.ipam.pre-allocate.
	PreAllocate int

	mu     sync.Mutex
	agents map[string]*agent
}

// agent is one node's cilium-agent: its CiliumNode as last written, and
// which IP each endpoint holds.
type agent struct {
	cn    *v2.CiliumNode
	owner map[string]string // IP -> owner ("router", "health", "ns/pod")
}

// New sets up the mock EC2 API (one subnet of 10.10.0.0/16) and the
// operator's ENI IPAM writing through core and dyn.
func New(ctx context.Context, log *slog.Logger, core kubernetes.Interface, dyn dynamic.Interface, preAllocate int) (*Grower, error) {
	subnet := &ipamtypes.Subnet{ID: "s-1", AvailabilityZone: "us-west-1", VirtualNetworkID: "vpc-1", AvailableAddresses: 30000}
	vpc := &ipamtypes.VirtualNetwork{ID: "vpc-1", PrimaryCIDR: iputil.PrefixFrom(netip.MustParsePrefix("10.10.0.0/16"))}
	g := &Grower{core: core, dyn: dyn, log: log, PreAllocate: preAllocate, agents: map[string]*agent{}}
	g.ec2 = apimock.NewAPI([]*ipamtypes.Subnet{subnet}, []*ipamtypes.VirtualNetwork{vpc}, []*awstypes.SecurityGroup{{ID: "sg-1", VpcID: "vpc-1"}}, nil)
	meta, err := metadatamock.NewMetadataMock()
	if err != nil {
		return nil, err
	}
	if g.instances, err = eniipam.NewInstancesManager(ctx, log, g.ec2, meta); err != nil {
		return nil, err
	}
	if g.mngr, err = nodemanager.NewNodeManager(log, g.instances, (*writer)(g), metricsmock.NewMockMetrics(), 10, false, 0, false); err != nil {
		return nil, err
	}
	return g, nil
}

// Run polls Nodes and Pods every interval until ctx ends.
func (g *Grower) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := g.step(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("step", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (g *Grower) step(ctx context.Context) error {
	nodes, err := g.core.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		g.mu.Lock()
		_, known := g.agents[n.Name]
		g.mu.Unlock()
		if !known {
			if err := g.join(ctx, n.Name); err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
		}
	}
	pods, err := g.core.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	byNode := map[string][]string{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Namespace+"/"+p.Name)
	}
	g.mu.Lock()
	names := make([]string, 0, len(g.agents))
	for name := range g.agents {
		names = append(names, name)
	}
	g.mu.Unlock()
	for _, name := range names {
		if err := g.endpoints(ctx, name, byNode[name]); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	return nil
}

// join attaches the node's first ENI (as the instance is launched with)
// and creates its CiliumNode as the agent does (pkg/nodediscovery: the
// instance, its type, first-interface-index, pre-allocate).
func (g *Grower) join(ctx context.Context, name string) error {
	instance := "i-" + name
	eni, _, err := g.ec2.CreateNetworkInterface(ctx, 0, "s-1", "capscale "+name, []string{"sg-1"}, false, false)
	if err != nil {
		return err
	}
	if _, err := g.ec2.AttachNetworkInterface(ctx, 0, instance, eni); err != nil {
		return err
	}
	if _, err := g.instances.Resync(ctx); err != nil {
		return err
	}
	first := 0
	cn := &v2.CiliumNode{
		TypeMeta:   metav1.TypeMeta{APIVersion: "cilium.io/v2", Kind: "CiliumNode"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v2.NodeSpec{
			InstanceID: instance,
			ENI:        awstypes.ENISpec{InstanceType: InstanceType, FirstInterfaceIndex: &first, AvailabilityZone: "us-west-1", VpcID: "vpc-1"},
			IPAM:       ipamtypes.IPAMSpec{PreAllocate: g.PreAllocate},
		},
	}
	u, err := toUnstructured(cn)
	if err != nil {
		return err
	}
	if _, err := g.dyn.Resource(ciliumNodes).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating its CiliumNode: %w", err)
	}
	g.mu.Lock()
	g.agents[name] = &agent{cn: cn, owner: map[string]string{}}
	g.mu.Unlock()
	g.log.Info("joined", "node", name, "instance", instance)
	g.mngr.Upsert(cn.DeepCopy())
	return nil
}

// endpoints gives the router, health and each pod of the node an IP of
// spec.ipam.pool, keeps the IPs of those still there, and writes
// status.ipam.used when it changed. A pod with no IP left in the pool is
// what the agent would fail its CNI ADD for: logged as "no IP".
func (g *Grower) endpoints(ctx context.Context, name string, pods []string) error {
	g.mu.Lock()
	a := g.agents[name]
	want := map[string]bool{"router": true, "health": true}
	for _, p := range pods {
		want[p] = true
	}
	changed := false
	held := map[string]bool{}
	for ip, o := range a.owner {
		if !want[o] {
			delete(a.owner, ip)
			changed = true
			continue
		}
		held[o] = true
	}
	free := freeIPs(a.cn.Spec.IPAM.Pool, a.owner)
	order := append([]string{"router", "health"}, pods...)
	var starved []string
	for _, o := range order {
		if held[o] {
			continue
		}
		if len(free) == 0 {
			// The router and health wait for the operator's first IPs;
			// a pod bound with none left is a failed CNI ADD.
			if o != "router" && o != "health" {
				starved = append(starved, o)
			}
			continue
		}
		a.owner[free[0]] = o
		free = free[1:]
		changed = true
	}
	pool := len(a.cn.Spec.IPAM.Pool)
	var cn *v2.CiliumNode
	if changed {
		a.cn.Status.IPAM.Used = ipamtypes.AllocationMap{}
		for ip, o := range a.owner {
			a.cn.Status.IPAM.Used[ip] = ipamtypes.AllocationIP{Owner: o, Resource: a.cn.Spec.IPAM.Pool[ip].Resource}
		}
		cn = a.cn.DeepCopy()
	}
	g.mu.Unlock()
	for _, o := range starved {
		g.log.Warn("no IP", "node", name, "endpoint", o, "pool", pool)
	}
	if cn == nil {
		return nil
	}
	if err := g.patchStatus(ctx, cn); err != nil {
		return err
	}
	g.mngr.Upsert(cn)
	return nil
}

func freeIPs(pool ipamtypes.AllocationMap, owner map[string]string) []string {
	var out []string
	for ip := range pool {
		if _, taken := owner[ip]; !taken {
			out = append(out, ip)
		}
	}
	sort.Slice(out, func(i, j int) bool { return netip.MustParseAddr(out[i]).Less(netip.MustParseAddr(out[j])) })
	return out
}

// patchStatus replaces the CiliumNode's status on the apiserver.
func (g *Grower) patchStatus(ctx context.Context, cn *v2.CiliumNode) error {
	return g.replace(ctx, cn.Name, "/status", cn.Status, "status")
}

func (g *Grower) replace(ctx context.Context, name, path string, v any, subresource ...string) error {
	b, err := json.Marshal([]map[string]any{{"op": "add", "path": path, "value": v}})
	if err != nil {
		return err
	}
	_, err = g.dyn.Resource(ciliumNodes).Patch(ctx, name, types.JSONPatchType, b, metav1.PatchOptions{}, subresource...)
	return err
}

// writer is the operator's CiliumNode client: spec and status as the
// operator writes them, with the agent's status.ipam.used kept.
type writer Grower

func (w *writer) Create(n *v2.CiliumNode) (*v2.CiliumNode, error) { return w.Update(nil, n) }

func (w *writer) Update(_, n *v2.CiliumNode) (*v2.CiliumNode, error) {
	g := (*Grower)(w)
	g.mu.Lock()
	a, ok := g.agents[n.Name]
	if ok {
		a.cn.Spec = *n.Spec.DeepCopy()
	}
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.replace(ctx, n.Name, "/spec", n.Spec); err != nil {
		return nil, err
	}
	g.log.Info("operator wrote spec", "node", n.Name, "pool", len(n.Spec.IPAM.Pool))
	return n, nil
}

func (w *writer) UpdateStatus(_, n *v2.CiliumNode) (*v2.CiliumNode, error) {
	g := (*Grower)(w)
	g.mu.Lock()
	a, ok := g.agents[n.Name]
	var st v2.NodeStatus
	if ok {
		used := a.cn.Status.IPAM.Used
		a.cn.Status = *n.Status.DeepCopy()
		a.cn.Status.IPAM.Used = used
		st = *a.cn.Status.DeepCopy()
	}
	g.mu.Unlock()
	if !ok {
		return n, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.replace(ctx, n.Name, "/status", st, "status"); err != nil {
		return nil, err
	}
	return n, nil
}

func (w *writer) Get(name string) (*v2.CiliumNode, error) {
	g := (*Grower)(w)
	g.mu.Lock()
	defer g.mu.Unlock()
	if a, ok := g.agents[name]; ok {
		return a.cn.DeepCopy(), nil
	}
	return nil, fmt.Errorf("no CiliumNode %s", name)
}

func toUnstructured(cn *v2.CiliumNode) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(cn)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, u.UnmarshalJSON(b)
}
