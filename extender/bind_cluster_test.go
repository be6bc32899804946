package extender_test

// Tests of the binder on the real informer wiring (fakecluster), from
// outside the package.

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/extender/extendertest"
	"github.com/capscale/capscale/extender/extendertest/fakecluster"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
)

var (
	pod  = extendertest.Pod
	node = extendertest.Node
)

// TestBindConcurrentNoOvercommit hammers Bind from many goroutines with far
// more demand than capacity and checks, against the API server's state, that
// no node ever got more than its capacity and that every IP was handed out.
func TestBindConcurrentNoOvercommit(t *testing.T) {
	capacities := map[string]string{"n0": "3", "n1": "0", "n2": "5", "n3": "1", "n4": "", "n5": "bogus"}
	want := map[string]int64{"n0": 3, "n1": 0, "n2": 5, "n3": 1, "n4": 10, "n5": 0}
	var total int64
	for _, c := range want {
		total += c
	}
	var objs []runtime.Object
	var nodeNames []string
	for name, c := range capacities {
		objs = append(objs, node(name, c))
		nodeNames = append(nodeNames, name)
	}
	const pods = 80
	for i := range pods {
		objs = append(objs, pod(fmt.Sprintf("p%02d", i), "", 1))
	}
	env := fakecluster.New(t, nil, objs...)

	const workers = 16
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		bound int64
	)
	work := make(chan int)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for i := range work {
				p := pod(fmt.Sprintf("p%02d", i), "", 1)
				// Like kube-scheduler retrying: every node, in a random order.
				for _, j := range rng.Perm(len(nodeNames)) {
					if err := env.Binder.Bind(context.Background(), bindArgs(p, nodeNames[j])).Err; err == nil {
						mu.Lock()
						bound++
						mu.Unlock()
						break
					}
				}
			}
		}()
	}
	for i := range pods {
		work <- i
	}
	close(work)
	wg.Wait()

	env.WaitSettled(t)
	got := env.BoundPerNode(t)
	var sum int64
	for name, used := range got {
		if used > want[name] {
			t.Errorf("node %s over capacity: %d > %d", name, used, want[name])
		}
		sum += used
	}
	if sum != total || bound != total {
		t.Errorf("bound %d IPs (%d successful binds), want exactly the capacity %d", sum, bound, total)
	}
	if u := env.Ledger.Report().Totals; u.Used != total || u.Reserved != 0 {
		t.Errorf("ledger totals %+v, want used %d reserved 0", u, total)
	}
}

// TestBindSamePodConcurrently binds one pod from many goroutines, as
// kube-scheduler may after a timeout: all succeed, it is counted once.
func TestBindSamePodConcurrently(t *testing.T) {
	env := fakecluster.New(t, nil, node("a", "1"), pod("p", "", 1))
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- env.Binder.Bind(context.Background(), bindArgs(pod("p", "", 1), "a")).Err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Bind: %v", err)
		}
	}
	env.WaitSettled(t)
	if u := env.Ledger.Usage("a"); u.Used != 1 || u.Reserved != 0 {
		t.Errorf("usage %+v, want used 1", u)
	}
	// The IP comes back when the pod goes.
	if err := env.CS.CoreV1().Pods("ns").Delete(context.Background(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return env.Ledger.Usage("a").Used == 0, nil })
	if err != nil {
		t.Errorf("deleted pod still holds its IP: %+v", env.Ledger.Usage("a"))
	}
}

func TestPodInformerCachesStrippedPods(t *testing.T) {
	p := pod("p", "a", 1)
	p.Labels = map[string]string{"app": "x"}
	env := fakecluster.New(t, nil, node("a", ""), p)
	obj, ok, err := env.PodInformer.GetIndexer().GetByKey("ns/p")
	if err != nil || !ok {
		t.Fatalf("pod not cached: %v", err)
	}
	got, ok := obj.(*extender.CachedPod)
	lookup := extender.IndexerLookup(env.PodInformer.GetIndexer())
	if !ok || got.Labels != nil || got.Need != 1 {
		t.Errorf("cached %T %+v, want a compact pod needing 1", obj, obj)
	}
	if found, ok := lookup("ns", "p"); !ok || found.UID != p.UID {
		t.Errorf("binder lookup = %+v, %v", found, ok)
	}
	if _, ok := lookup("ns", "missing"); ok {
		t.Error("binder lookup found a pod that does not exist")
	}
}

func bindArgs(p *v1.Pod, node string) extender.BindRequest {
	return extender.BindRequest{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Node: node}
}
