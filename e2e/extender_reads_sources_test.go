//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestExtenderReadsCapacitySources (issue 55 §6): in extender mode the
// extender may read the capacity sources itself (--capacity-sources), as
// capscale-scheduler's plugin does in plugin mode, so that a change of
// the IPAM's object reaches filter and bind without the mirror's Node
// patch. With capscale-controller's mirror stopped, a node whose object
// goes from 0 to 2 takes exactly 2 of 3 pods waiting there, while the
// Node still carries the mirror's old 0.
func TestExtenderReadsCapacitySources(t *testing.T) {
	src := ownIPAM(t)
	o := stack.Options{Plane: plane.Options{Nodes: 2, Logf: t.Logf}, Extender: true, SchedulerReadsSources: true}
	o.CapacitySources = ownIPAMSourceSelecting("marked", "")
	o.Prepare = src.crd
	s := startStack(t, o)
	if !s.ExtenderReadsSources() || s.Controller == nil {
		t.Fatalf("the extender reads the sources: %v; capscale-controller runs: %v", s.ExtenderReadsSources(), s.Controller != nil)
	}
	ctx := testContext(t, 5*time.Minute)
	n0 := plane.NodeName(0)
	putObject(ctx, t, s, src.gvr, src.object(n0, "", 0))
	waitMirrored(ctx, t, s, n0, is(0), 0)
	// The extender's own read of the object may come after the mirror's
	// (CI, stop 77, before its /readyz waited for the sources: three pods
	// were tried while it had read nothing). A pod turned away for
	// capacity, not for a node not read or with no object, shows it has.
	if err := s.WaitForNamespace(ctx, "probe"); err != nil {
		t.Fatal(err)
	}
	probe := rejectedSaying(ctx, t, s, "probe", "probe", n0, "underlay IP capacity too small", "capacity source not read yet", "object maps to this node")
	deleteAndWaitGone(ctx, t, s, "probe", probe)

	// From here on only the extender's own read can see a change.
	s.Controller.Stop(30 * time.Second)
	const ns = "reads"
	if reason := pinnedPending(ctx, t, s, ns, n0, 3); !strings.Contains(reason, "underlay IP capacity too small") {
		t.Errorf("FailedScheduling says %q, want the extender's underlay IP capacity too small", reason)
	}
	start := time.Now()
	putObject(ctx, t, s, src.gvr, src.object(n0, "", 2))
	waitUnderlay(ctx, t, s, ns, map[string]int{n0: 2}, 2, 1)
	t.Logf("2 pods bound %s after the object said 2, the mirror stopped", time.Since(start).Round(time.Millisecond))
	stayBoundPending(ctx, t, s, ns, 2, 1, 2*time.Second)
	n, err := s.Client.CoreV1().Nodes().Get(ctx, n0, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := n.Annotations[names.UnderlayIPSourceCapacityAnnotation]; v != "0" {
		t.Fatalf("node %s says %s=%q, want the stopped mirror's 0: then the mirror, not the extender, let the pods in", n0, names.UnderlayIPSourceCapacityAnnotation, v)
	}
}
