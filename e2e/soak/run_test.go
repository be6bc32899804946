package soak

import (
	"cmp"
	"context"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/capscale/capscale/internal/names"
)

// TestCapacityFor: above largeCluster the default nodes hold 2 IPs, and the
// 3, 0 and invalid nodes stay as they are; at or below it nothing changes.
func TestCapacityFor(t *testing.T) {
	annotation := func(nodes, i int) string {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		capacityFor(nodes)(i, n)
		v, ok := n.Annotations[names.UnderlayIPCapacityAnnotation]
		if !ok {
			return "default"
		}
		return v
	}
	for _, c := range []struct {
		nodes, i int
		want     string
	}{
		{1000, 0, "default"}, {1000, 1, "3"}, {1000, 2, "0"}, {1000, 3, "many"},
		{5000, 0, "2"}, {5000, 1, "3"}, {5000, 2, "0"}, {5000, 3, "many"}, {5000, 4999, "2"},
	} {
		if got := annotation(c.nodes, c.i); got != c.want {
			t.Errorf("%d nodes, node %d: annotation %s, want %s", c.nodes, c.i, got, c.want)
		}
	}
}

// TestScaleIPPaced: with maxStep set, every scale moves a Deployment by at
// most maxStep, stays in the band and still sweeps across most of it (a
// demand that only hovers above capacity binds nothing); without it a
// scale may jump across the band (the 1000-node soak, paced by
// kube-controller-manager).
func TestScaleIPPaced(t *testing.T) {
	for _, c := range []struct {
		maxStep   int32
		wantLimit bool
	}{{3, true}, {0, false}} {
		client := fake.NewClientset()
		ch := &churn{c: client, rng: rand.New(rand.NewPCG(1, 2)), ipDeployments: []string{"ip-a", "ip-b"}, capacity: 10000, maxStep: c.maxStep, logf: t.Logf}
		ctx := context.Background()
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := ch.setUp(ctx); err != nil {
			t.Fatal(err)
		}
		prev := map[string]int32{"ip-a": 5000, "ip-b": 5000}
		lo, hi := map[string]int32{}, map[string]int32{}
		biggest := int32(0)
		for range 1000 {
			if err := ch.scaleIP(ctx); err != nil {
				t.Fatal(err)
			}
			for name, was := range prev {
				d, err := client.AppsV1().Deployments(Namespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				n := *d.Spec.Replicas
				biggest = max(biggest, n-was, was-n)
				lo[name], hi[name] = min(n, cmp.Or(lo[name], n)), max(n, hi[name])
				if n < 4500-c.maxStep || n > 5750+c.maxStep {
					t.Fatalf("maxStep %d: %s at %d replicas, outside the band 4500..5750", c.maxStep, name, n)
				}
				prev[name] = n
			}
		}
		if c.wantLimit && biggest > c.maxStep {
			t.Errorf("maxStep %d: a scale moved %d replicas", c.maxStep, biggest)
		}
		for name := range prev {
			if hi[name]-lo[name] < 400 {
				t.Errorf("maxStep %d: %s stayed within %d..%d of the band 4500..5750", c.maxStep, name, lo[name], hi[name])
			}
		}
		if !c.wantLimit && biggest <= 3 {
			t.Errorf("unpaced: the biggest scale moved %d replicas; the 1000-node soak's churn changed", biggest)
		}
	}
	if stepFor(1000) != 0 || stepFor(5000) != 3 {
		t.Errorf("stepFor: 1000 nodes %d, 5000 nodes %d; want 0 and 3", stepFor(1000), stepFor(5000))
	}
}

// TestUnderlayPodsNameTheProfile: in extender and plugin mode the churn's
// underlay pods (Deployments and bare pods) name capscale-scheduler, the
// profile that scores every node; plain pods and native mode keep
// default-scheduler.
func TestUnderlayPodsNameTheProfile(t *testing.T) {
	for _, mode := range []string{"extender", "plugin", "native"} {
		want := "capscale-scheduler"
		if mode == "native" {
			want = ""
		}
		client := fake.NewClientset()
		ctx := context.Background()
		ch := &churn{c: client, rng: rand.New(rand.NewPCG(1, 2)), ipDeployments: []string{"ip-a"}, capacity: 10, scheduler: schedulerFor(mode), logf: t.Logf}
		if err := ch.setUp(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ch.createBare(ctx); err != nil {
			t.Fatal(err)
		}
		d, err := client.AppsV1().Deployments(Namespace).Get(ctx, "ip-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		plain, err := client.AppsV1().Deployments(Namespace).Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bare, err := client.CoreV1().Pods(Namespace).Get(ctx, "bare-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Spec.SchedulerName; got != want {
			t.Errorf("%s mode: underlay Deployment names %q, want %q", mode, got, want)
		}
		if got := bare.Spec.SchedulerName; got != want {
			t.Errorf("%s mode: bare underlay pod names %q, want %q", mode, got, want)
		}
		if got := plain.Spec.Template.Spec.SchedulerName; got != "" {
			t.Errorf("%s mode: plain pods name %q, want the default", mode, got)
		}
	}
}

// TestApplicable: extender mode checks all seven invariants, native mode
// four (no reservations, waiting set or requeue writes), plugin mode three
// (nor a view of its own).
func TestApplicable(t *testing.T) {
	for mode, want := range map[string]int{"extender": 7, "native": 4, "plugin": 3} {
		if got := len(Applicable(mode)); got != want {
			t.Errorf("%s mode: %d invariants apply, want %d", mode, got, want)
		}
	}
}

// TestCounter: a run's count is the counter's rises, and a restarted
// process's count from 0.
func TestCounter(t *testing.T) {
	var c counter
	for _, v := range []float64{100, 130, 160, 5, 25} {
		c.add(v)
	}
	if c.total != 60+5+20 {
		t.Errorf("total %v, want 85", c.total)
	}
}
