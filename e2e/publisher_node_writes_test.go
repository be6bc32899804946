//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestPublisherNodeWrites: native mode's publisher may patch Nodes to
// remove the startup taint capscale.io/underlay-ip-unpublished, and RBAC
// cannot narrow that to one taint; deploy/native/node-taint.yaml's
// ValidatingAdmissionPolicy does. As the extender's ServiceAccount
// (impersonated, with deploy/'s RBAC), removing that taint is allowed;
// removing another taint, adding one, a cordon, a label or an annotation
// is refused by the policy.
func TestPublisherNodeWrites(t *testing.T) {
	ctx, p := nodeWritesPlane(t, "extender/rbac.yaml", "native/rbac.yaml", "native/node-taint.yaml")
	ext := asServiceAccount(t, p, "capscale-extender")
	node := plane.NodeName(0)
	setTaints := func(c kubernetes.Interface, dryRun bool, keys ...string) error {
		var ts []string
		for _, k := range keys {
			ts = append(ts, fmt.Sprintf(`{"key":%q,"effect":"NoSchedule"}`, k))
		}
		return patchNodeAs(ctx, c, node, dryRun, `{"spec":{"taints":[`+strings.Join(ts, ",")+`]}}`)
	}
	const other = "e2e/other"
	if err := setTaints(p.Client, false, other, names.UnderlayIPUnpublishedTaint); err != nil {
		t.Fatal(err)
	}
	// The apiserver loads a policy and its binding asynchronously.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return refusedBy(setTaints(ext, true), "capscale-publisher-node-writes"), nil
	})
	if err != nil {
		t.Fatalf("the policy never refused removing every taint: %v", setTaints(ext, true))
	}
	for _, tc := range []struct{ name, body string }{
		{"another taint removed", `{"spec":{"taints":[{"key":"` + names.UnderlayIPUnpublishedTaint + `","effect":"NoSchedule"}]}}`},
		{"a taint added", `{"spec":{"taints":[{"key":"e2e/other","effect":"NoSchedule"},{"key":"e2e/evil","effect":"NoSchedule"}]}}`},
		{"cordon", `{"spec":{"unschedulable":true}}`},
		{"label", `{"metadata":{"labels":{"e2e/relabelled":"yes"}}}`},
		{"capacity annotation", fmt.Sprintf(`{"metadata":{"annotations":{%q:"64"}}}`, names.UnderlayIPCapacityAnnotation)},
	} {
		if err := patchNodeAs(ctx, ext, node, false, tc.body); !refusedBy(err, "capscale-publisher-node-writes") {
			t.Errorf("%s by the publisher: %v, want the policy's refusal", tc.name, err)
		}
	}
	// What the publisher does: only its taint goes.
	if err := setTaints(ext, false, other); err != nil {
		t.Fatalf("removing the startup taint as the publisher: %v", err)
	}
	got, err := p.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Taints) != 1 || got.Spec.Taints[0].Key != other || got.Spec.Unschedulable || got.Labels["e2e/relabelled"] != "" {
		t.Errorf("node after the writes: taints %v, unschedulable %v, labels %v", got.Spec.Taints, got.Spec.Unschedulable, got.Labels)
	}
}

func patchNodeAs(ctx context.Context, c kubernetes.Interface, node string, dryRun bool, body string) error {
	o := metav1.PatchOptions{FieldManager: "capscale-capacity-publisher"}
	if dryRun {
		o.DryRun = []string{metav1.DryRunAll}
	}
	_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), o)
	return err
}

// nodeWritesPlane starts a plane of one node with capscale's namespace and
// deploy/'s files applied, for 3 minutes of test.
func nodeWritesPlane(t *testing.T, files ...string) (context.Context, *plane.Plane) {
	t.Helper()
	p := startPlane(t, plane.Options{Nodes: 1})
	ctx := testContext(t, 3*time.Minute)
	if err := p.WaitForNamespace(ctx, stack.Namespace); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if out, err := p.Kubectl(ctx, "apply", "-f", stack.DeployFile(f)); err != nil {
			t.Fatalf("applying %s: %v\n%s", f, err, out)
		}
	}
	return ctx, p
}
