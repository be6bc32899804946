package publisher

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestPublisherWorkersWriteSideBySide holds every status patch until four
// are in flight at once: one worker waits out each patch's round trip, and
// at 5000 nodes that alone kept a fresh install from publishing within
// issue 55 §6's 30 s.
func TestPublisherWorkersWriteSideBySide(t *testing.T) {
	const workers = 4
	cs := fake.NewClientset()
	for i := range workers {
		n := node(map[string]string{names.UnderlayIPCapacityAnnotation: "4"}, "", "")
		n.Name = fmt.Sprintf("node-%d", i)
		if err := cs.Tracker().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	// The fake clientset runs one call at a time, so the gate sits in
	// front of it.
	var (
		mu       sync.Mutex
		inFlight int
		all      = make(chan struct{})
	)
	gate := func() error {
		mu.Lock()
		if inFlight++; inFlight == workers {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-time.After(2 * time.Second):
			mu.Lock()
			inFlight--
			mu.Unlock()
			return fmt.Errorf("fewer than %d status patches in flight at once", workers)
		}
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	p, err := New(gatedClient{cs, gate}, factory.Core().V1().Nodes(), Options{Rule: underlay.Rule{Default: 10}, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	p.newRecorder = func(context.Context) (record.EventRecorder, func()) { return record.NewFakeRecorder(100), func() {} }
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }()
	defer runTerm(p)()
	select {
	case <-all:
	case <-time.After(5 * time.Second):
		t.Fatalf("never %d status patches in flight at once", workers)
	}
	for i := range workers {
		waitPublished(t, cs, fmt.Sprintf("node-%d", i), 4)
	}
}

// gatedClient is cs with gate run before each Node status patch.
type gatedClient struct {
	*fake.Clientset
	gate func() error
}

func (g gatedClient) CoreV1() typedcorev1.CoreV1Interface {
	return gatedCore{g.Clientset.CoreV1(), g.gate}
}

type gatedCore struct {
	typedcorev1.CoreV1Interface
	gate func() error
}

func (g gatedCore) Nodes() typedcorev1.NodeInterface {
	return gatedNodes{g.CoreV1Interface.Nodes(), g.gate}
}

type gatedNodes struct {
	typedcorev1.NodeInterface
	gate func() error
}

func (g gatedNodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*v1.Node, error) {
	if len(sub) > 0 && sub[0] == "status" {
		if err := g.gate(); err != nil {
			return nil, err
		}
	}
	return g.NodeInterface.Patch(ctx, name, pt, data, opts, sub...)
}
