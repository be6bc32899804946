package release

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/internal/kube"
)

var now = time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)

func node(name string, ready v1.ConditionStatus) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: ready}}}}
}

// pod is a pod on node with finalizers, deleted with grace 0 at deleted
// (nil: not deleted).
func pod(name, node string, phase v1.PodPhase, deleted *time.Time, finalizers ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Finalizers: finalizers},
		Spec: v1.PodSpec{NodeName: node}, Status: v1.PodStatus{Phase: phase}}
	if deleted != nil {
		p.DeletionTimestamp = &metav1.Time{Time: *deleted}
		p.DeletionGracePeriodSeconds = ptr.To[int64](0)
	}
	return p
}

// TestReleaser: the finalizer goes once the pod's node gave its IPs back,
// and only then; only capscale's finalizer goes.
// runReleaser starts the Releaser build makes, on cs's informers and a
// fake clock at now, until the test ends; ctx ends with the test.
func runReleaser(t *testing.T, cs kubernetes.Interface, now time.Time, build func(coreinformers.NodeInformer) (*Releaser, error)) (*Releaser, context.Context) {
	t.Helper()
	factory := kube.InformerFactory(cs)
	if _, err := extender.NodeInformer(factory); err != nil {
		t.Fatal(err)
	}
	r, err := build(factory.Core().V1().Nodes())
	if err != nil {
		t.Fatal(err)
	}
	r.clock = clocktesting.NewFakeClock(now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
	factory.Start(ctx.Done())
	go func() { defer close(done); r.Run(ctx) }()
	return r, ctx
}

func TestReleaser(t *testing.T) {
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	objs := []*v1.Pod{
		pod("force-running", "ready", v1.PodRunning, ago(time.Second), Finalizer),
		pod("force-finished", "ready", v1.PodFailed, ago(time.Second), "example.com/other", Finalizer),
		pod("force-node-gone", "gone", v1.PodRunning, ago(time.Second), Finalizer),
		pod("force-unbound", "", v1.PodPending, ago(time.Second), Finalizer),
		pod("force-silent-node", "notready", v1.PodRunning, ago(8*time.Second), Finalizer),
		pod("force-silent-node-in-hold", "notready", v1.PodRunning, ago(time.Second), Finalizer),
		pod("running", "ready", v1.PodRunning, nil, Finalizer),
		pod("pending", "", v1.PodPending, nil, Finalizer),
		pod("finished-not-deleted", "ready", v1.PodSucceeded, nil, Finalizer),
	}
	cs := fake.NewClientset(node("ready", v1.ConditionTrue), node("notready", v1.ConditionUnknown))
	for _, p := range objs {
		if _, err := cs.CoreV1().Pods("ns").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	r, ctx := runReleaser(t, cs, now, func(nodes coreinformers.NodeInformer) (*Releaser, error) { return New(cs, nodes, reg) })

	released := map[string][]string{
		"force-finished":       {"example.com/other"},
		"force-node-gone":      nil,
		"force-unbound":        nil,
		"force-silent-node":    nil,
		"finished-not-deleted": nil,
	}
	finalizers := func(name string) []string {
		p, err := cs.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Finalizers
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for name, want := range released {
			if !slices.Equal(finalizers(name), want) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for name, want := range released {
			t.Errorf("pod %s: finalizers %v, want %v", name, finalizers(name), want)
		}
	}
	for _, name := range []string{"force-running", "force-silent-node-in-hold", "running", "pending"} {
		if got := finalizers(name); !slices.Equal(got, []string{Finalizer}) {
			t.Errorf("pod %s: finalizers %v, want capscale's kept: its node may still hold its IP", name, got)
		}
	}
	if got := testutil.ToFloat64(r.removals.WithLabelValues("finished")); got != 2 {
		t.Errorf("removals{reason=finished} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(r.removals.WithLabelValues("hold_over")); got != 1 {
		t.Errorf("removals{reason=hold_over} = %v, want 1", got)
	}

	// The kubelet writes the terminal phase once the sandbox is stopped.
	p, err := cs.CoreV1().Pods("ns").Get(ctx, "force-running", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = v1.PodFailed
	if _, err := cs.CoreV1().Pods("ns").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(finalizers("force-running")) == 0, nil
	})
	if err != nil {
		t.Errorf("pod force-running Failed: finalizers %v, want none", finalizers("force-running"))
	}
}

// TestCleanupReleaser: at uninstall every pod loses the finalizer, and
// only it, except one being deleted whose node may still hold its IP; at
// the cleanup's deadline that one too, so that none stays Terminating.
func TestCleanupReleaser(t *testing.T) {
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	for _, tc := range []struct {
		name     string
		deadline time.Time
		kept     []string
	}{
		{name: "before the deadline", deadline: now.Add(time.Hour), kept: []string{"ns/force-running"}},
		{name: "at the deadline", deadline: now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(node("ready", v1.ConditionTrue))
			for _, p := range []*v1.Pod{
				pod("running", "ready", v1.PodRunning, nil, "example.com/other", Finalizer),
				pod("pending", "", v1.PodPending, nil, Finalizer),
				pod("force-running", "ready", v1.PodRunning, ago(time.Second), Finalizer),
				pod("force-finished", "ready", v1.PodFailed, ago(time.Second), Finalizer),
				pod("foreign", "ready", v1.PodRunning, nil, "example.com/other"),
			} {
				if _, err := cs.CoreV1().Pods("ns").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			r, ctx := runReleaser(t, cs, now, func(nodes coreinformers.NodeInformer) (*Releaser, error) { return NewCleanup(cs, nodes, tc.deadline) })

			var carrying []string
			err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				var synced bool
				carrying, synced = r.Carrying()
				return synced && slices.Equal(carrying, tc.kept), nil
			})
			if err != nil {
				t.Errorf("pods carrying the finalizer: %v, want %v", carrying, tc.kept)
			}
			want := map[string][]string{"running": {"example.com/other"}, "foreign": {"example.com/other"}}
			for _, name := range []string{"running", "pending", "force-running", "force-finished", "foreign"} {
				p, err := cs.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				w := want[name]
				if slices.Contains(tc.kept, "ns/"+name) {
					w = []string{Finalizer}
				}
				if !slices.Equal(p.Finalizers, w) {
					t.Errorf("pod %s: finalizers %v, want %v", name, p.Finalizers, w)
				}
			}
		})
	}
}
