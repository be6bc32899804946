package devices

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/capscale/capscale/internal/underlay"
)

func pluginPod(name, node string, phase v1.PodPhase, ready v1.ConditionStatus) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "capscale-system", Labels: map[string]string{"app": "plugin"}},
		Spec:       v1.PodSpec{NodeName: node},
		Status:     v1.PodStatus{Phase: phase},
	}
	if ready != "" {
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue}, {Type: v1.PodReady, Status: ready}}
	}
	return p
}

func TestServed(t *testing.T) {
	deleting := pluginPod("p", "n1", v1.PodRunning, v1.ConditionTrue)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	for _, tc := range []struct {
		name string
		pods []*v1.Pod
		want bool
	}{
		{name: "no plugin pod (not started, or the DaemonSet leaves the node out)", want: false},
		{name: "Running and Ready: the kubelet registered it", pods: []*v1.Pod{pluginPod("p", "n1", v1.PodRunning, v1.ConditionTrue)}, want: true},
		{name: "Running, not Ready yet (not registered, or refused)", pods: []*v1.Pod{pluginPod("p", "n1", v1.PodRunning, v1.ConditionFalse)}, want: false},
		{name: "Running, no Ready condition written yet", pods: []*v1.Pod{pluginPod("p", "n1", v1.PodRunning, "")}, want: false},
		{name: "Pending (pulling its image)", pods: []*v1.Pod{pluginPod("p", "n1", v1.PodPending, v1.ConditionFalse)}, want: false},
		{name: "Failed (evicted) with a stale Ready", pods: []*v1.Pod{pluginPod("p", "n1", v1.PodFailed, v1.ConditionTrue)}, want: false},
		{name: "being deleted, still Ready", pods: []*v1.Pod{deleting}, want: false},
		{name: "unbound", pods: []*v1.Pod{pluginPod("p", "", v1.PodRunning, v1.ConditionTrue)}, want: false},
		{name: "a rollout: the old one going, the new one Ready", pods: []*v1.Pod{deleting, pluginPod("q", "n1", v1.PodRunning, v1.ConditionTrue)}, want: true},
		{name: "a rollout: the old one going, the new one not Ready yet", pods: []*v1.Pod{deleting, pluginPod("q", "n1", v1.PodRunning, v1.ConditionFalse)}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Served(tc.pods); got != tc.want {
				t.Errorf("Served = %v, want %v", got, tc.want)
			}
		})
	}
}

// gatedPublisher is a publisher over fake clients whose caches the test
// fills; sync writes to the fake clientset, and what it wrote is copied
// into the slice cache, as the informer would.
type gatedPublisher struct {
	*Publisher
	cs  *fake.Clientset
	reg *prometheus.Registry
}

func newGatedPublisher(t *testing.T, selector labels.Selector) *gatedPublisher {
	t.Helper()
	cs := fake.NewClientset()
	f := informers.NewSharedInformerFactory(cs, 0)
	reg := prometheus.NewRegistry()
	p, err := New(cs, f.Core().V1().Nodes(), Options{
		Rule: underlay.Rule{Default: 3}, Registerer: reg,
		PluginSelector: selector, PluginNamespace: "capscale-system",
	})
	if err != nil {
		t.Fatal(err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}}
	if err := f.Core().V1().Nodes().Informer().GetStore().Add(node); err != nil {
		t.Fatal(err)
	}
	return &gatedPublisher{Publisher: p, cs: cs, reg: reg}
}

// syncNode syncs n1 and returns the devices its pool publishes.
func (g *gatedPublisher) syncNode(t *testing.T) []string {
	t.Helper()
	if err := g.sync(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	list, err := g.cs.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range list.Items {
		s := &list.Items[i]
		if err := g.slices.GetStore().Update(s); err != nil {
			t.Fatal(err)
		}
		for _, d := range s.Spec.Devices {
			out = append(out, d.Name)
		}
	}
	slices.Sort(out)
	return out
}

func (g *gatedPublisher) setPlugin(t *testing.T, p *v1.Pod) {
	t.Helper()
	o, err := compactPluginPod(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.plugins.GetStore().Update(o); err != nil {
		t.Fatal(err)
	}
}

// TestPublisherHoldsUnservedNode: with the gate, a node whose kubelet
// plugin is not Ready publishes no free device, what claims hold stays
// allocated (the publisher touches no claim), and the node's budget comes
// back once the plugin is Ready; capscale_extender_unserved_nodes counts
// it meanwhile. Without the gate every node publishes its budget.
func TestPublisherHoldsUnservedNode(t *testing.T) {
	g := newGatedPublisher(t, labels.SelectorFromSet(labels.Set{"app": "plugin"}))
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: "c-1"},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Driver: Driver, Pool: "n1", Device: "ip-1", Request: "r"}},
		}}},
	}
	c, err := compactClaim(claim)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.claims.GetStore().Add(c); err != nil {
		t.Fatal(err)
	}
	unserved := func() float64 { return testutil.ToFloat64(g.unservedNodes) }

	if got := g.syncNode(t); len(got) != 0 {
		t.Errorf("no plugin pod on n1: devices %v, want none", got)
	}
	if unserved() != 1 {
		t.Errorf("capscale_extender_unserved_nodes %v with n1's plugin missing, want 1", unserved())
	}
	g.setPlugin(t, pluginPod("plugin-n1", "n1", v1.PodRunning, v1.ConditionFalse))
	if got := g.syncNode(t); len(got) != 0 {
		t.Errorf("n1's plugin Running, not Ready: devices %v, want none", got)
	}
	g.setPlugin(t, pluginPod("plugin-n1", "n1", v1.PodRunning, v1.ConditionTrue))
	if got, want := g.syncNode(t), []string{"ip-0", "ip-1", "ip-2"}; !slices.Equal(got, want) {
		t.Errorf("n1's plugin Ready: devices %v, want %v (the budget of 3, the allocated ip-1 among them)", got, want)
	}
	if unserved() != 0 {
		t.Errorf("capscale_extender_unserved_nodes %v with n1's plugin Ready, want 0", unserved())
	}
	gone := pluginPod("plugin-n1", "n1", v1.PodRunning, v1.ConditionTrue)
	gone.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	g.setPlugin(t, gone)
	if got := g.syncNode(t); len(got) != 0 {
		t.Errorf("n1's plugin being deleted: devices %v, want none", got)
	}
	if unserved() != 1 {
		t.Errorf("capscale_extender_unserved_nodes %v with n1's plugin going, want 1", unserved())
	}
	for _, a := range g.cs.Actions() {
		if a.GetResource().Resource != "resourceslices" {
			t.Errorf("the publisher called %s %s; a claim stays as it is", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if n, err := testutil.GatherAndCount(g.reg, "capscale_extender_unserved_nodes"); err != nil || n != 1 {
		t.Errorf("registered unserved_nodes series: %d, %v", n, err)
	}

	ungated := newGatedPublisher(t, nil)
	if got, want := ungated.syncNode(t), []string{"ip-0", "ip-1", "ip-2"}; !slices.Equal(got, want) {
		t.Errorf("without --kubelet-plugin-selector and no plugin pod: devices %v, want %v", got, want)
	}
	if v := testutil.ToFloat64(ungated.unservedNodes); v != 0 {
		t.Errorf("capscale_extender_unserved_nodes %v without the gate, want 0", v)
	}
}
