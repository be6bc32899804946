package publisher

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

func TestPacer(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	g := newPacer(200 * time.Millisecond)
	steps := []struct {
		node string
		ms   int
		want time.Duration
	}{
		{"a", 0, 0},                        // after a quiet period: at once, a batch opens
		{"b", 50, 150 * time.Millisecond},  // waits for the batch at 200
		{"c", 120, 80 * time.Millisecond},  // the same batch
		{"b", 150, 50 * time.Millisecond},  // synced again meanwhile: still that batch
		{"b", 200, 0},                      // the batch goes
		{"d", 210, 190 * time.Millisecond}, // after it: the next, at 400
		{"c", 230, 0},                      // late for its batch: goes, the next stays at 400
		{"e", 600, 0},                      // quiet again: at once
	}
	for _, s := range steps {
		if got := g.admit(s.node, at(s.ms)); got != s.want {
			t.Fatalf("node %s at %d ms: wait %v, want %v", s.node, s.ms, got, s.want)
		}
	}
	if got := g.waiting(); got != 1 {
		t.Fatalf("%d nodes waiting, want 1 (d)", got)
	}
	g.drop("d")
	if got := g.waiting(); got != 0 {
		t.Fatalf("%d nodes waiting after drop, want 0", got)
	}
	off := newPacer(0)
	for i := range 3 {
		if got := off.admit("a", at(i)); got != 0 {
			t.Fatalf("period 0: wait %v, want none", got)
		}
	}
}

func TestRises(t *testing.T) {
	rule := underlay.Rule{Default: 10}
	published := func(capacity, value string) *v1.Node {
		return node(map[string]string{names.UnderlayIPCapacityAnnotation: capacity, PublishedAnnotation: value}, value, value)
	}
	tainted := published("8", "4")
	tainted.Spec.Taints = []v1.Taint{{Key: StartupTaint, Effect: v1.TaintEffectNoSchedule}}
	for _, c := range []struct {
		name string
		node *v1.Node
		sent int64
		want bool
	}{
		{"increase", published("8", "4"), -1, true},
		{"decrease", published("3", "4"), -1, false},
		{"unchanged", published("4", "4"), -1, false},
		{"first publication", node(map[string]string{names.UnderlayIPCapacityAnnotation: "8"}, "", ""), -1, false},
		{"below a value written and not shown yet", published("6", "4"), 7, false},
		{"above a value written and not shown yet", published("8", "4"), 7, true},
		{"startup taint", tainted, -1, false},
		{"invalid", published("x", "4"), -1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.node, rule, Use{})
			if got := Rises(c.node, d, c.sent); got != c.want {
				t.Fatalf("Rises = %v, want %v (decision %+v)", got, c.want, d)
			}
		})
	}
}

// TestPublisherBatchesIncreases: with a period, the first increase goes at
// once and the next waits for the batch; a decrease never waits; and the
// batch goes when its time comes.
func TestPublisherBatchesIncreases(t *testing.T) {
	named := func(name, capacity string) *v1.Node {
		n := node(map[string]string{names.UnderlayIPCapacityAnnotation: capacity, PublishedAnnotation: "4"}, "4", "4")
		n.Name = name
		return n
	}
	cs := fake.NewClientset(named("a", "4"), named("b", "4"), named("c", "4"))
	written := make(chan string, 10)
	cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			written <- a.(k8stesting.PatchAction).GetName()
		}
		return false, nil, nil
	})
	// Long enough that a node held by it is not written within the test's
	// waits below, however slow the machine.
	const period = time.Hour
	p, _ := newTestPublisher(t, cs, Options{Rule: underlay.Rule{Default: 10}, IncreasePeriod: period})
	stop := runTerm(p)
	defer stop()
	waitWaiting(t, p, 0)

	annotate(t, cs, "a", "8")
	waitPublished(t, cs, "a", 8) // the first increase: at once
	annotate(t, cs, "b", "8")
	waitWaiting(t, p, 1) // the second waits for the batch
	annotate(t, cs, "c", "2")
	waitPublished(t, cs, "c", 2) // a decrease: at once, though a batch waits
	if got := drainNames(written); fmt.Sprint(got) != "[a c]" {
		t.Fatalf("status patches %v, want [a c]: b's increase waits for the batch", got)
	}
	// The held increase falls back: nothing waits, and nothing is written.
	annotate(t, cs, "b", "4")
	waitWaiting(t, p, 0)
	if got := drainNames(written); len(got) != 0 {
		t.Fatalf("status patches %v after b's increase was taken back, want none", got)
	}
	n, err := cs.CoreV1().Nodes().Get(context.Background(), "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := n.Status.Allocatable[underlay.Resource]; a.Value() != 4 {
		t.Fatalf("node b allocatable %s, want 4", a.String())
	}
}

// TestPublisherBatchGoes: a held increase is written when its batch comes.
func TestPublisherBatchGoes(t *testing.T) {
	named := func(name string) *v1.Node {
		n := node(map[string]string{names.UnderlayIPCapacityAnnotation: "4", PublishedAnnotation: "4"}, "4", "4")
		n.Name = name
		return n
	}
	cs := fake.NewClientset(named("a"), named("b"))
	p, _ := newTestPublisher(t, cs, Options{Rule: underlay.Rule{Default: 10}, IncreasePeriod: 300 * time.Millisecond})
	stop := runTerm(p)
	defer stop()
	annotate(t, cs, "a", "8")
	annotate(t, cs, "b", "9")
	waitPublished(t, cs, "a", 8)
	waitPublished(t, cs, "b", 9)
	waitWaiting(t, p, 0)
}

func waitWaiting(t *testing.T, p *Publisher, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.pace.waiting() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d nodes wait for a batch, want %d", p.pace.waiting(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func drainNames(c chan string) []string {
	var out []string
	for {
		select {
		case s := <-c:
			out = append(out, s)
		default:
			return out
		}
	}
}
