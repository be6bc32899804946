//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestNativeReadsCapacitySources (issue 55 §6): native mode's publisher
// reads the capacity sources itself, as the chart renders it by default
// (controller.capacitySources.publisherReads: auto), with no
// capscale-controller running:
//   - each node gets the sources' capacity in its status and the mirror's
//     annotations;
//   - a change of the IPAM's object reaches the Node in one write: no
//     version of the Node carries the new annotation with the old
//     allocatable, which the mirror's patch followed by the publisher's
//     shows (NativeMirror, the same steps, does show it);
//   - with the extender down a re-created node takes no pod; once it is
//     back exactly what the object says binds there;
//   - an object that goes leaves its node invalid: kube-scheduler's own
//     Insufficient for the pods that ask there.
func TestNativeReadsCapacitySources(t *testing.T) {
	for _, mirror := range []bool{false, true} {
		t.Run(fmt.Sprintf("mirror=%v", mirror), func(t *testing.T) { nativeReadsCapacitySources(t, mirror) })
	}
}

func nativeReadsCapacitySources(t *testing.T, mirror bool) {
	src := ownIPAM(t)
	o := stack.Options{Plane: plane.Options{Nodes: 2, Logf: t.Logf}, Native: true, NativeMirror: mirror}
	o.CapacitySources = ownIPAMSourceSelecting("marked", "")
	o.Prepare = func(ctx context.Context, s *stack.Stack) error { return src.crd(ctx, s) }
	s := startStack(t, o)
	if reads := s.PublisherReadsSources(); reads == mirror || (s.Controller != nil) != mirror {
		t.Fatalf("the publisher reads the sources: %v; capscale-controller runs: %v", reads, s.Controller != nil)
	}
	ctx := testContext(t, 5*time.Minute)
	n0, n1 := plane.NodeName(0), plane.NodeName(1)
	putObject(ctx, t, s, src.gvr, src.object(n0, "", 2))
	putObject(ctx, t, s, src.gvr, src.object(n1, "", 2))
	waitMirrored(ctx, t, s, n0, is(2), 2)
	waitMirrored(ctx, t, s, n1, is(2), 2)

	// Every version of n0 from now until it says 3.
	split := watchSplitWrite(ctx, t, s, n0, "3", func() { putObject(ctx, t, s, src.gvr, src.object(n0, "", 3)) })
	if mirror {
		// The test's own check: the mirror's path does show the step
		// in between, so the assertion below can fail.
		if !split {
			t.Fatal("with the controller's mirror no version of the Node carried the new annotation before its new capacity")
		}
		return
	}
	if split {
		t.Fatal("a version of the Node carried the sources' new capacity annotation with the old allocatable: two writes, not one")
	}

	// The extender (the publisher and its read) down: a re-created node
	// has none of the mirror's annotations and no capacity.
	s.KillExtender()
	recreateNode(ctx, t, s, n1, true)
	const ns = "fresh"
	if reason := pinnedPending(ctx, t, s, ns, n1, 3); !strings.Contains(reason, "Insufficient") {
		t.Errorf("FailedScheduling says %q, want kube-scheduler's Insufficient", reason)
	}
	start := time.Now()
	if err := s.StartExtender(ctx); err != nil {
		t.Fatal(err)
	}
	waitUnderlay(ctx, t, s, ns, map[string]int{n1: 2}, 2, 1)
	t.Logf("the extender back to 2 pods bound on the re-created node: %s", time.Since(start).Round(time.Millisecond))
	stayBoundPending(ctx, t, s, ns, 2, 1, 2*time.Second)
	waitNodeAnnotation(ctx, t, s, n1, names.UnderlayIPSourceAnnotation, func(v string) bool { return strings.HasPrefix(v, "own-ipam ") }, 2)

	// n0's object goes: invalid, the IPs in use (none) published.
	deleteObject(ctx, t, s, src.gvr, src.object(n0, "", 3))
	waitMirrored(ctx, t, s, n0, func(v string) bool { return strings.HasPrefix(v, "invalid:") }, 0)
	if reason := pinnedPending(ctx, t, s, "gone", n0, 1); !strings.Contains(reason, "Insufficient "+names.UnderlayIPResource) {
		t.Errorf("FailedScheduling says %q, want kube-scheduler's Insufficient %s", reason, names.UnderlayIPResource)
	}
}

// watchSplitWrite watches node while change runs, until its source
// capacity annotation is want and its allocatable too, and reports
// whether any version in between carried the annotation with another
// allocatable.
func watchSplitWrite(ctx context.Context, t *testing.T, s *stack.Stack, node, want string, change func()) bool {
	t.Helper()
	n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String(), ResourceVersion: n.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	change()
	split := false
	deadline := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch of node %s ended", node)
			}
			n, isNode := ev.Object.(*corev1.Node)
			if ev.Type != watch.Modified || !isNode || n.Annotations[names.UnderlayIPSourceCapacityAnnotation] != want {
				continue
			}
			if a := n.Status.Allocatable[names.UnderlayIPResource]; a.String() != want {
				split = true
				continue
			}
			return split
		case <-deadline:
			t.Fatalf("node %s never said %s in both its annotation and its allocatable", node, want)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}
