package app

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/internal/names"
)

// TestConfigCachesCompactNodes: the binary's node informer, which the ledger
// and (native mode) the publisher share, holds only what they read, not
// the kubelet's images and conditions.
func TestConfigCachesCompactNodes(t *testing.T) {
	full := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a",
			Labels:      map[string]string{"kubernetes.io/hostname": "a", names.UnderlayIPCapacityLabel: "3"},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"}},
		Status: v1.NodeStatus{
			Images:     []v1.ContainerImage{{Names: []string{"registry.example/app:v1"}, SizeBytes: 1 << 20}},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		},
	}
	o := NewOptions()
	o.PublishCapacity = true
	c, err := o.ConfigWithClient(fake.NewClientset(full))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); c.Factory.Shutdown() })
	c.Factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.Synced) {
		t.Fatal("informers did not sync")
	}
	got, err := c.Factory.Core().V1().Nodes().Lister().Get("a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Images != nil || got.Status.Conditions != nil || got.Annotations != nil ||
		len(got.Labels) != 1 || got.Labels[names.UnderlayIPCapacityLabel] != "3" || got.UID != "uid-a" {
		t.Errorf("cached node %+v, want name, UID and the capacity label only", got)
	}
	if rep := c.Ledger.Report(); rep.Totals.Capacity != 3 {
		t.Errorf("ledger capacity %d from the cached node, want its label's 3", rep.Totals.Capacity)
	}
}

// TestConfigTellsThePublisherOfPods: in native mode the ledger's pod events
// reach the publisher (an invalid node publishes the IPs in use and must
// follow a holder leaving at once); in extender mode there is no publisher.
func TestConfigTellsThePublisherOfPods(t *testing.T) {
	for _, publish := range []bool{true, false} {
		o := NewOptions()
		o.PublishCapacity = publish
		c, err := o.ConfigWithClient(fake.NewClientset())
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Tracker.UsageChanged != nil; got != publish {
			t.Errorf("--publish-capacity=%v: the tracker tells of pod events: %v", publish, got)
		}
	}
}

// TestClientsPublisherHasItsOwnLimiter: the publisher's Node writes do not
// queue behind the binds' --kube-api-qps, nor the binds behind them; at 50
// a second together a fresh install of 5000 nodes took 100 s to publish.
func TestClientsPublisherHasItsOwnLimiter(t *testing.T) {
	o := NewOptions()
	o.PublishCapacity = true
	c, _, err := o.clients(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.publish == nil {
		t.Fatal("no publisher client: its writes share the binds' limiter")
	}
	main, pub := c.main.CoreV1().RESTClient().GetRateLimiter(), c.publish.CoreV1().RESTClient().GetRateLimiter()
	if pub == nil || pub == main {
		t.Fatalf("publisher limiter %v, the main one %v: want one of its own", pub, main)
	}
	if got := pub.QPS(); got != o.PublishQPS {
		t.Errorf("publisher QPS %v, want --publish-qps %v", got, o.PublishQPS)
	}
	if got := main.QPS(); got != o.KubeAPIQPS {
		t.Errorf("main QPS %v, want --kube-api-qps %v", got, o.KubeAPIQPS)
	}
}
