// Package fakecluster runs the extender's ledger and binder on their real
// informer wiring over a fake API server, for the tests of extender and
// extender/wire.
package fakecluster

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/extender/extendertest"
	"github.com/capscale/capscale/internal/underlay"
)

// Cluster is a fake API server holding objects, with pods/binding served
// by extendertest.BindingAPI and the extender's informers, ledger
// (default capacity 10) and binder on top, synced.
type Cluster struct {
	CS          *fake.Clientset
	PodInformer cache.SharedIndexInformer
	API         *extendertest.BindingAPI
	Ledger      *extender.Ledger
	Binder      *extender.Binder
	Synced      func() bool
}

// New starts a Cluster holding objs; m may be nil. It stops at t's cleanup.
func New(t testing.TB, m *extender.Metrics, objs ...runtime.Object) *Cluster {
	t.Helper()
	cs := fake.NewClientset(objs...)
	api := &extendertest.BindingAPI{}
	api.Install(cs)
	factory := informers.NewSharedInformerFactory(cs, 0)
	podInformer, err := extender.PodInformer(factory)
	if err != nil {
		t.Fatal(err)
	}
	if m == nil {
		m = extender.NewMetrics(nil)
	}
	l := extender.NewLedger(extender.LedgerOptions{DefaultCapacity: 10})
	tracker := &extender.Tracker{Ledger: l, Metrics: m}
	synced, err := tracker.Attach(podInformer, factory.Core().V1().Nodes().Informer())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		t.Fatal("informers did not sync")
	}
	return &Cluster{CS: cs, PodInformer: podInformer, API: api, Ledger: l, Synced: synced,
		Binder: extender.NewBinder(cs, extender.IndexerLookup(podInformer.GetIndexer()), l)}
}

// BoundPerNode sums the need of the pods the API server has bound, by node.
func (c *Cluster) BoundPerNode(t testing.TB) map[string]int64 {
	t.Helper()
	pods, err := c.CS.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for i := range pods.Items {
		if n := pods.Items[i].Spec.NodeName; n != "" {
			out[n] += underlay.PodNeed(&pods.Items[i])
		}
	}
	return out
}

// WaitSettled waits until the informer has turned every reservation into use.
func (c *Cluster) WaitSettled(t testing.TB) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return c.Ledger.Report().Totals.Reserved == 0, nil })
	if err != nil {
		t.Fatalf("reservations never settled: %+v", c.Ledger.Report().Totals)
	}
}
