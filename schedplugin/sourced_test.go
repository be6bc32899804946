package schedplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// sourcedRig is a plugin that reads the cilium-eni preset itself, over
// fake clients: n1 has a CiliumNode, n2 none, and both carry an older
// mirror on the Node that the plugin must not read.
type sourcedRig struct {
	pl  *Plugin
	dyn *dynamicfake.FakeDynamicClient
	gvr schema.GroupVersionResource
	cs  *fake.Clientset

	mu        sync.Mutex
	activated []string
	reg       *prometheus.Registry
}

func newSourcedRig(t *testing.T, ctx context.Context) *sourcedRig {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(path, []byte("sources: [{name: cilium, preset: cilium-eni}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srcs, err := capacitysource.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	stale := map[string]string{names.UnderlayIPSourceCapacityAnnotation: "4", names.UnderlayIPSourceAnnotation: "cilium ciliumnodes.cilium.io/old"}
	node := func(name string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"zone": name}, Annotations: stale}}
	}
	r := &sourcedRig{cs: fake.NewClientset(node("n1"), node("n2")), gvr: srcs[0].Resource.GVR()}
	r.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{r.gvr: "CiliumNodeList"},
		ipamtest.CiliumNodeENI("n1", "uid-n1", 12, nil))

	rule := underlay.Rule{Default: 10, AwaitSource: true}
	s := newSourced(rule, func(pods map[string]*v1.Pod) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for k := range pods {
			r.activated = append(r.activated, k)
		}
	})
	r.reg = prometheus.NewRegistry()
	s.metrics = newReadMetrics(r.reg)
	if s.view, err = capacitysource.NewView(r.dyn, srcs, s.metrics.view, s.changed); err != nil {
		t.Fatal(err)
	}
	f := informers.NewSharedInformerFactory(r.cs, 0)
	s.nodes = f.Core().V1().Nodes().Lister()
	synced, err := s.follow(f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer())
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	s.run(ctx, synced)
	t.Cleanup(f.Shutdown)
	r.pl = &Plugin{rule: rule, caps: newStampedCapacities(), sourced: s}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return s.entry("n1").mirror.Load() != nil && s.entry("n2").mirror.Load() != nil, nil
	}); err != nil {
		t.Fatal("the first read never came")
	}
	return r
}

func (r *sourcedRig) node(t *testing.T, name string) *v1.Node {
	t.Helper()
	n, err := r.pl.sourced.nodes.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (r *sourcedRig) setPool(t *testing.T, ctx context.Context, pool int) {
	t.Helper()
	if _, err := r.dyn.Resource(r.gvr).Update(ctx, ipamtest.CiliumNodeENI("n1", "uid-n1", pool, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (r *sourcedRig) takeActivated() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.activated
	r.activated = nil
	return out
}

// TestSourcedReadsTheObjects: the plugin's capacity is what the IPAM's
// object says, not the older mirror the Node carries; a node with no
// object is invalid, not the label or the default; and a change of the
// object reaches the capacity of the same Node object, which no Node
// update marks (the memo's reading is stamped with the view's gen).
func TestSourcedReadsTheObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newSourcedRig(t, ctx)
	n1 := r.node(t, "n1")
	if c := r.pl.capacity(n1); c.IPs != 10 || c.Origin != "cilium ciliumnodes.cilium.io/n1" || !c.DrawsAll {
		t.Fatalf("n1: %+v, want 10 from its CiliumNode, drawing all", c)
	}
	if c := r.pl.capacity(r.node(t, "n2")); c.IPs != 0 || !strings.Contains(c.Invalid, "no ciliumnodes.cilium.io object maps to this node") {
		t.Errorf("n2 without an object: %+v, want invalid", c)
	}
	m := r.pl.sourced.metrics
	if synced, nodes := testutil.ToFloat64(m.synced), testutil.ToFloat64(m.nodes); synced != 1 || nodes != 2 {
		t.Errorf("capscale_scheduler_capacity_sources_synced %v, _nodes_read %v; want 1 and 2 after the first read", synced, nodes)
	}
	const want = `
# HELP capscale_scheduler_capacity_source_evaluations_total Capacity-source objects evaluated (once per object change), by source and result: valid (a count), invalid (the capacity expression gave none) or no_node (the node expression failed).
# TYPE capscale_scheduler_capacity_source_evaluations_total counter
capscale_scheduler_capacity_source_evaluations_total{result="valid",source="cilium"} 1
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "capscale_scheduler_capacity_source_evaluations_total"); err != nil {
		t.Errorf("the scheduler's evaluations of n1's CiliumNode: %v", err)
	}
	// Published, as a PreFilter does: from now on Filter and Score are
	// answered from the memo.
	r.pl.caps.sync(infos(n1))
	if _, ok := r.pl.caps.stamped.known.Load().get(n1); !ok {
		t.Fatal("n1's reading not published")
	}
	r.setPool(t, ctx, 20)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return r.pl.capacity(n1).IPs == 18, nil
	}); err != nil {
		t.Fatalf("n1's capacity after its pool grew: %d, want 18 read from the same Node object", r.pl.capacity(n1).IPs)
	}
}

// TestSourcedWakesThePodsItMayFit: a pod turned away is activated by the
// change that gives it room on a node it may go to, and not by a change
// that gives none, nor by one on a node its selector excludes.
func TestSourcedWakesThePodsItMayFit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newSourcedRig(t, ctx)
	pod := func(name string, ips int64, zone string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{names.UnderlayIPResource: *resource.NewQuantity(ips, resource.DecimalSI)}}}}}}
		if zone != "" {
			p.Spec.NodeSelector = map[string]string{"zone": zone}
		}
		return p
	}
	r.pl.sourced.turnedAway(pod("big", 15, ""))
	r.pl.sourced.turnedAway(pod("elsewhere", 15, "n2"))
	n1 := r.node(t, "n1")
	// settled waits for n1's capacity to read want and for the read that
	// stored it to have woken whom it wakes (read holds reading until then).
	settled := func(want int64) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return r.pl.capacity(n1).IPs == want, nil
		}); err != nil {
			t.Fatalf("n1's capacity never read %d", want)
		}
		r.pl.sourced.reading.Lock()
		defer r.pl.sourced.reading.Unlock()
	}
	// Down to 8: no room for anyone.
	r.setPool(t, ctx, 10)
	settled(8)
	if got := r.takeActivated(); len(got) != 0 {
		t.Errorf("a capacity that went down activated %v", got)
	}
	// Up to 12, still short of big's 15.
	r.setPool(t, ctx, 14)
	settled(12)
	if got := r.takeActivated(); len(got) != 0 {
		t.Errorf("a capacity that grew short of the need activated %v", got)
	}
	// Up to 18: room for big on n1, none for elsewhere, which may not go there.
	r.setPool(t, ctx, 20)
	settled(18)
	var got []string
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got = append(got, r.takeActivated()...)
		return len(got) > 0, nil
	}); err != nil {
		t.Fatal("no pod activated after n1's pool grew to 18")
	}
	if len(got) != 1 || got[0] != "shop/big" {
		t.Errorf("activated %v, want [shop/big]", got)
	}
	if _, left := r.pl.sourced.waiting["shop/elsewhere"]; !left {
		t.Error("a pod the change could not help is no longer waiting")
	}
}

// TestSourcedBindCheck: the check at bind reads the view over the Node it
// reads fresh, whose older mirror (40) would have let the pod through: n1
// holds 10 by its CiliumNode, 10 in use.
func TestSourcedBindCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newSourcedRig(t, ctx)
	n1 := r.node(t, "n1")
	r.pl.fresh = &apiNodes{annotations: map[string]map[string]string{"n1": {
		names.UnderlayIPSourceCapacityAnnotation: "40", names.UnderlayIPSourceAnnotation: "cilium ciliumnodes.cilium.io/n1"}}}
	r.pl.nodeInfos = usedNodes{"n1": {node: n1, used: 10}}
	state, pod := newMapState(), ipPod("p", "", 1)
	if st := r.pl.Reserve(ctx, state, pod, "n1"); !st.IsSuccess() {
		t.Fatalf("Reserve = %v", st)
	}
	if st := r.pl.Bind(ctx, state, pod, "n1"); st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "10/10 used") {
		t.Errorf("Bind = %v %q; want Unschedulable, 10/10 used by the view's capacity", st.Code(), st.Message())
	}
}

func TestArgsCapacitySourcesNeedAwait(t *testing.T) {
	_, err := DecodeArgs(&runtime.Unknown{Raw: []byte(`{"capacitySources": "/etc/capscale/sources.yaml"}`), ContentType: runtime.ContentTypeJSON})
	if err == nil || !strings.Contains(err.Error(), "awaitCapacitySource") {
		t.Errorf("capacitySources without awaitCapacitySource: %v, want an error naming awaitCapacitySource", err)
	}
	if _, err := DecodeArgs(&runtime.Unknown{Raw: []byte(`{"capacitySources": "/x", "awaitCapacitySource": true}`), ContentType: runtime.ContentTypeJSON}); err != nil {
		t.Errorf("capacitySources with awaitCapacitySource: %v", err)
	}
}

// TestSourcedPostFilterNotesThePod: a cycle that placed an underlay pod
// nowhere leaves it waiting for a change of the sources; a pod that takes
// no IP is not kept.
func TestSourcedPostFilterNotesThePod(t *testing.T) {
	rule := underlay.Rule{Default: 10, AwaitSource: true}
	pl := &Plugin{rule: rule, sourced: newSourced(rule, nil)}
	for _, p := range []*v1.Pod{ipPod("needs", "", 1), ipPod("plain", "", 0)} {
		pl.PostFilter(context.Background(), newMapState(), p, nil)
	}
	if _, ok := pl.sourced.waiting["default/needs"]; !ok || len(pl.sourced.waiting) != 1 {
		t.Errorf("waiting %v, want only default/needs", pl.sourced.waiting)
	}
}

// fakeHandle is the part of a framework handle the plugin's read of the
// sources takes: a client config (to nowhere), informers and Activate.
type fakeHandle struct {
	fwk.Handle
	f informers.SharedInformerFactory
}

func (h fakeHandle) KubeConfig() *rest.Config                               { return &rest.Config{Host: "https://127.0.0.1:1"} }
func (h fakeHandle) SharedInformerFactory() informers.SharedInformerFactory { return h.f }
func (h fakeHandle) Activate(klog.Logger, map[string]*v1.Pod)               {}

// TestSourcedOncePerProcess: the profiles of one scheduler (the chart runs
// two) share one read of a sources file, so no object change is decoded
// twice; another file gets its own.
func TestSourcedOncePerProcess(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	file := func(name string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("sources: [{name: cilium, preset: cilium-eni}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a, b := file("a.yaml"), file("b.yaml")
	h := fakeHandle{f: informers.NewSharedInformerFactory(fake.NewClientset(), 0)}
	args := func(path string) Args {
		d := DefaultCapacity
		return Args{DefaultCapacity: &d, AwaitCapacitySource: true, CapacitySources: path}
	}
	first, err := newSourcedFor(ctx, h, args(a))
	if err != nil {
		t.Fatal(err)
	}
	second, err := newSourcedFor(ctx, h, args(a))
	if err != nil {
		t.Fatal(err)
	}
	other, err := newSourcedFor(ctx, h, args(b))
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Error("two profiles with one sources file got two reads")
	}
	if other == first {
		t.Error("another sources file shared the first one's read")
	}
}
