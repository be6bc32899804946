//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestControllerNodeWrites (issue 50): capscale-controller may patch Nodes
// (its capacity-source mirror), and RBAC cannot narrow that to its
// annotations; deploy/controller/node-writes.yaml's ValidatingAdmissionPolicy
// does. As the controller's ServiceAccount (impersonated, with the RBAC
// deploy/ gives it), a taint, a cordon, a label or a foreign annotation is
// refused by the policy, while capscale's own annotations are written.
func TestControllerNodeWrites(t *testing.T) {
	ctx, p := nodeWritesPlane(t, "controller/rbac.yaml", "capacity-sources/rbac.yaml")
	ctrl := asServiceAccount(t, p, "capscale-controller")
	nodes, err := p.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("listing nodes: %v (%d)", err, len(nodes.Items))
	}
	node := nodes.Items[0].Name
	patch := func(dryRun bool, body string) error {
		o := metav1.PatchOptions{FieldManager: names.FieldManager}
		if dryRun {
			o.DryRun = []string{metav1.DryRunAll}
		}
		_, err := ctrl.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), o)
		return err
	}
	taint := `{"spec":{"taints":[{"key":"e2e/evil","effect":"NoSchedule"}]}}`

	// RBAC alone lets the controller taint the node: what the policy is for.
	if err := patch(true, taint); err != nil {
		t.Fatalf("before the policy, the controller's taint (dry run) was refused: %v; the test would prove nothing", err)
	}
	if out, err := p.Kubectl(ctx, "apply", "-f", stack.DeployFile("controller/node-writes.yaml")); err != nil {
		t.Fatalf("applying the policy: %v\n%s", err, out)
	}
	// The apiserver loads a policy and its binding asynchronously.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return refusedByPolicy(patch(true, taint)), nil
	})
	if err != nil {
		t.Fatalf("the policy never refused the controller's taint: %v", patch(true, taint))
	}

	for _, tc := range []struct{ name, body string }{
		{"taint", taint},
		{"cordon", `{"spec":{"unschedulable":true}}`},
		{"label", `{"metadata":{"labels":{"e2e/relabelled":"yes"}}}`},
		{"foreign annotation", `{"metadata":{"annotations":{"e2e/other":"x"}}}`},
		{"capacity annotation", fmt.Sprintf(`{"metadata":{"annotations":{%q:"64"}}}`, names.UnderlayIPCapacityAnnotation)},
		{"finalizer", `{"metadata":{"finalizers":["e2e/hold"]}}`},
	} {
		if err := patch(false, tc.body); !refusedByPolicy(err) {
			t.Errorf("%s by capscale-controller: %v, want the policy's refusal", tc.name, err)
		}
	}
	if err := ctrl.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
		t.Errorf("capscale-controller may delete a node")
	}

	// Its own annotations: written, and removed.
	own := `{"metadata":{"annotations":{"capscale.io/underlay-ip-source-capacity":"12","capscale.io/underlay-ip-source":"e2e","capscale.io/underlay-ip-source-max-capacity":"20","capscale.io/underlay-ip-draws":"all"}}}`
	if err := patch(false, own); err != nil {
		t.Fatalf("writing capscale's own annotations: %v", err)
	}
	if err := patch(false, `{"metadata":{"annotations":{"capscale.io/underlay-ip-source-max-capacity":null,"capscale.io/underlay-ip-draws":null}}}`); err != nil {
		t.Errorf("removing capscale's own annotations: %v", err)
	}
	got, err := p.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations["capscale.io/underlay-ip-source-capacity"] != "12" || len(got.Spec.Taints) != 0 || got.Spec.Unschedulable || got.Labels["e2e/relabelled"] != "" {
		t.Errorf("node after the writes: annotations %v, taints %v, unschedulable %v, labels %v", got.Annotations, got.Spec.Taints, got.Spec.Unschedulable, got.Labels)
	}
	// Anyone else (the admin) is not held by it.
	if _, err := p.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e/admin":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the admin's label: %v", err)
	}
}

// refusedByPolicy reports whether err is capscale-controller-node-writes'
// refusal (not RBAC's).
func refusedByPolicy(err error) bool { return refusedBy(err, "capscale-controller-node-writes") }

// refusedBy reports whether err is the ValidatingAdmissionPolicy policy's
// refusal: a policy's denial is 422 Invalid unless its validation names
// another reason.
func refusedBy(err error, policy string) bool {
	return (apierrors.IsInvalid(err) || apierrors.IsForbidden(err)) &&
		strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
}

// asServiceAccount is a client of p that impersonates capscale's
// ServiceAccount sa, with the groups its token would carry.
func asServiceAccount(t *testing.T, p *plane.Plane, sa string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(p.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + stack.Namespace + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + stack.Namespace, "system:authenticated"},
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
