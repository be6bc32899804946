//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestNativeReleasePolicies: deploy/native/release.yaml on kube-apiserver.
// Its MutatingAdmissionPolicy puts the release finalizer on every pod that
// asks for an underlay IP, also when the marked-namespace policy gave it
// the request (reinvocation), and on no other pod; a pod that carries it
// and is deleted with grace 0 stays, Terminating, until it is removed.
// Its ValidatingAdmissionPolicy lets capscale-extender and the uninstall's
// capscale-release-cleanup (impersonated, with deploy/'s RBAC) remove that
// finalizer and change nothing else.
func TestNativeReleasePolicies(t *testing.T) {
	p := startPlane(t, plane.Options{Nodes: 1})
	ctx := testContext(t, 3*time.Minute)
	if err := p.WaitForNamespace(ctx, stack.Namespace); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"extender/rbac.yaml", "native/rbac.yaml", "admission/underlay-ip.yaml", "native/release.yaml"} {
		if out, err := p.Kubectl(ctx, "apply", "-f", stack.DeployFile(f)); err != nil {
			t.Fatalf("applying %s: %v\n%s", f, err, out)
		}
	}
	marked := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "marked", Labels: map[string]string{names.UnderlayNamespaceLabel: "true"}}}
	if _, err := p.Client.CoreV1().Namespaces().Create(ctx, marked, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod is admitted only once its namespace's default ServiceAccount
	// exists, which kube-controller-manager makes in its own time.
	for _, ns := range []string{"plain", "marked"} {
		if err := p.WaitForNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(ns, name string, ips int64, finalizers ...string) *corev1.Pod {
		q := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: finalizers},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "e2e/none"}}}}
		if ips > 0 {
			q.Spec.Containers[0].Resources.Limits = underlayRequest(ips)
		}
		return q
	}
	// The apiserver loads policies asynchronously: wait for both, on dry runs.
	var probe *corev1.Pod
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		probe, last = p.Client.CoreV1().Pods("marked").Create(ctx, pod("marked", "probe", 0), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last == nil && slices.Contains(probe.Finalizers, names.UnderlayIPReleaseFinalizer), nil
	})
	if err != nil {
		t.Fatalf("the release policy never gave a marked pod its finalizer: %v (last create: %v, %+v)", err, last, probe)
	}

	for _, q := range []*corev1.Pod{
		pod("plain", "asks", 1), pod("plain", "asks-kept", 1, "e2e/keep"), pod("plain", "no-ip", 0), pod("marked", "marked", 0),
	} {
		if _, err := p.Client.CoreV1().Pods(q.Namespace).Create(ctx, q, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	finalizers := func(ns, name string) ([]string, error) {
		q, err := p.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return q.Finalizers, nil
	}
	for _, tc := range []struct {
		ns, name string
		want     []string
	}{
		{"plain", "asks", []string{names.UnderlayIPReleaseFinalizer}},
		{"plain", "asks-kept", []string{"e2e/keep", names.UnderlayIPReleaseFinalizer}},
		{"plain", "no-ip", nil},
		{"marked", "marked", []string{names.UnderlayIPReleaseFinalizer}},
	} {
		if got, err := finalizers(tc.ns, tc.name); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("pod %s/%s: finalizers %v (%v), want %v", tc.ns, tc.name, got, err, tc.want)
		}
	}

	ext := asServiceAccount(t, p, "capscale-extender")
	patch := func(name string, pt types.PatchType, body string, dryRun bool) error {
		o := metav1.PatchOptions{}
		if dryRun {
			o.DryRun = []string{metav1.DryRunAll}
		}
		_, err := ext.CoreV1().Pods("plain").Patch(ctx, name, pt, []byte(body), o)
		return err
	}
	// The uninstall's release-cleanup (deploy/native/release-cleanup.yaml's
	// RBAC, not its Job) is held the same way.
	applyWithoutJob(ctx, t, p, "native/release-cleanup.yaml")
	cleanup := asServiceAccount(t, p, "capscale-release-cleanup")
	cleanupPatch := func(name string, pt types.PatchType, body string) error {
		_, err := cleanup.CoreV1().Pods("plain").Patch(ctx, name, pt, []byte(body), metav1.PatchOptions{})
		return err
	}
	remove := func(at int, value string) string {
		return fmt.Sprintf(`[{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`, at, value, at)
	}
	const policy = "capscale-extender-pod-writes"
	label := `{"metadata":{"labels":{"e2e/relabelled":"yes"}}}`
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return refusedBy(patch("asks", types.MergePatchType, label, true), policy), nil
	})
	if err != nil {
		t.Fatalf("the policy never refused the extender's label: %v", patch("asks", types.MergePatchType, label, true))
	}
	for _, tc := range []struct{ name, pod, body string }{
		{"annotation", "asks", `{"metadata":{"annotations":{"e2e/a":"x"}}}`},
		{"active deadline", "asks", `{"spec":{"activeDeadlineSeconds":5}}`},
		{"another finalizer", "asks-kept", remove(0, "e2e/keep")},
		{"a finalizer added", "asks", `{"metadata":{"finalizers":["capscale.io/underlay-ip-release","e2e/more"]}}`},
	} {
		pt := types.MergePatchType
		if tc.body[0] == '[' {
			pt = types.JSONPatchType
		}
		if err := patch(tc.pod, pt, tc.body, false); !refusedBy(err, policy) {
			t.Errorf("%s by capscale-extender: %v, want the policy's refusal", tc.name, err)
		}
		if err := cleanupPatch(tc.pod, pt, tc.body); !refusedBy(err, policy) {
			t.Errorf("%s by capscale-release-cleanup: %v, want the policy's refusal", tc.name, err)
		}
	}
	if err := patch("asks-kept", types.JSONPatchType, remove(1, names.UnderlayIPReleaseFinalizer), true); err != nil {
		t.Errorf("capscale-extender removing the release finalizer: %v", err)
	}
	if err := cleanupPatch("asks-kept", types.JSONPatchType, remove(1, names.UnderlayIPReleaseFinalizer)); err != nil {
		t.Errorf("capscale-release-cleanup removing the release finalizer: %v", err)
	}
	if got, err := finalizers("plain", "asks-kept"); err != nil || !slices.Equal(got, []string{"e2e/keep"}) {
		t.Errorf("pod asks-kept after the release: finalizers %v (%v), want [e2e/keep]", got, err)
	}

	// A grace-0 delete leaves the pod, Terminating, until the finalizer goes.
	if err := p.Client.CoreV1().Pods("plain").Delete(ctx, "asks", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	q, err := p.Client.CoreV1().Pods("plain").Get(ctx, "asks", metav1.GetOptions{})
	if err != nil || q.DeletionTimestamp == nil || ptr.Deref(q.DeletionGracePeriodSeconds, -1) != 0 {
		t.Fatalf("pod asks force-deleted with the finalizer: %v, %+v; want it Terminating with grace 0", err, q)
	}
	if err := patch("asks", types.JSONPatchType, remove(0, names.UnderlayIPReleaseFinalizer), false); err != nil {
		t.Fatalf("capscale-extender releasing the force-deleted pod: %v", err)
	}
	if _, err := p.Client.CoreV1().Pods("plain").Get(ctx, "asks", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod asks after its finalizer went: %v, want it gone", err)
	}
}

// applyWithoutJob applies deploy/'s file f without its Jobs: kwok would
// end their pods at once without running anything.
func applyWithoutJob(ctx context.Context, t *testing.T, p *plane.Plane, f string) {
	t.Helper()
	b, err := os.ReadFile(stack.DeployFile(f))
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, doc := range strings.Split(string(b), "\n---\n") {
		if !strings.Contains(doc, "\nkind: Job\n") {
			keep = append(keep, doc)
		}
	}
	out := filepath.Join(t.TempDir(), filepath.Base(f))
	if err := os.WriteFile(out, []byte(strings.Join(keep, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if o, err := p.Kubectl(ctx, "apply", "-f", out); err != nil {
		t.Fatalf("applying %s: %v\n%s", f, err, o)
	}
}
