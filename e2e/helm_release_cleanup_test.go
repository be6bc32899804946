//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestHelmReleaseCleanup (issue 49 §5): a native install with the chart's
// defaults puts the release finalizer on the pods that ask for an underlay
// IP, and `helm uninstall` leaves none with it: its pre-delete hook deletes
// the policy, then strips the finalizer from every pod (a force-deleted
// one, pods created during the uninstall) before the publisher goes, so
// that a namespace's deletion completes afterwards.
//
// kwok runs no container and completes a Job's pod at once, so the hook's
// pod is kept off the nodes (a nodeSelector no node has) and the test runs
// its command, `extender release-cleanup`, with the hook ServiceAccount's
// own token (its RBAC, the ValidatingAdmissionPolicy's hold), then ends the
// pod Succeeded as its kubelet would. TestRealNodeHelmInstall runs the hook
// for real.
func TestHelmReleaseCleanup(t *testing.T) {
	p := startPlane(t, plane.Options{Nodes: 2})
	ctx := testContext(t, 4*time.Minute)
	helm := helmCommand(ctx, t, p)
	chart := filepath.Join("deploy", "helm", "capscale")
	install := []string{chart, "--create-namespace", "--set", "extender.mode=native", "--set-string", "extender.nodeSelector.e2e/hook=none"}
	if out, err := helm(append([]string{"install", "capscale"}, install...)...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	checkCleanupHook(ctx, t, helm)

	const ns = "apps"
	if err := p.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, ips int64, finalizers ...string) *corev1.Pod {
		q := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: finalizers},
			Spec: corev1.PodSpec{NodeName: plane.NodeName(len(name) % 2), Containers: []corev1.Container{{Name: "c", Image: "e2e/none"}}}}
		if ips > 0 {
			q.Spec.Containers[0].Resources.Limits = underlayRequest(ips)
		}
		return q
	}
	// The apiserver loads the policy asynchronously: wait on dry runs.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		probe, err := p.Client.CoreV1().Pods(ns).Create(ctx, pod("probe", 1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && slices.Contains(probe.Finalizers, names.UnderlayIPReleaseFinalizer), nil
	})
	if err != nil {
		t.Fatalf("a default native install never gave a pod asking for an underlay IP the release finalizer: %v", err)
	}
	create := func(pods ...*corev1.Pod) {
		t.Helper()
		for _, q := range pods {
			got, err := p.Client.CoreV1().Pods(ns).Create(ctx, q, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if has := slices.Contains(got.Finalizers, names.UnderlayIPReleaseFinalizer); has != (q.Name != "no-ip") {
				t.Errorf("pod %s: finalizers %v", q.Name, got.Finalizers)
			}
		}
	}
	create(pod("up-0", 1))

	// An upgrade that turns it off strips it first (pre-upgrade), and
	// one back to the default turns it on again.
	upgraded := make(chan error, 1)
	go func() { upgraded <- helmUpgrade(helm, append(install, "--set", "extender.releaseFinalizer=false")) }()
	runCleanupHook(ctx, t, p, "pre-upgrade")
	if err := <-upgraded; err != nil {
		t.Fatal(err)
	}
	if left := podsWithReleaseFinalizer(ctx, t, p, metav1.NamespaceAll); len(left) > 0 {
		t.Errorf("after the upgrade that turned it off pods %v carry the release finalizer", left)
	}
	if _, err := p.Client.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, "capscale-underlay-ip-release", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the upgrade that turned it off the release policy: %v, want it gone", err)
	}
	if err := helmUpgrade(helm, install); err != nil {
		t.Fatal(err)
	}
	checkCleanupHook(ctx, t, helm)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		probe, err := p.Client.CoreV1().Pods(ns).Create(ctx, pod("probe", 1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && slices.Contains(probe.Finalizers, names.UnderlayIPReleaseFinalizer), nil
	}); err != nil {
		t.Fatalf("the upgrade back to the default did not turn the release finalizer on again: %v", err)
	}
	create(pod("asks-0", 1), pod("asks-1", 2), pod("kept", 1, "e2e/keep"), pod("force", 1), pod("no-ip", 0))
	// Terminating when the hook runs: nothing removes the finalizer on kwok
	// (no publisher runs), and kwok's kubelet ends it Failed.
	if err := p.Client.CoreV1().Pods(ns).Delete(ctx, "force", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}

	// Pods keep coming while helm uninstalls.
	stop := make(chan struct{})
	var created sync.WaitGroup
	created.Add(1)
	go func() {
		defer created.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			if _, err := p.Client.CoreV1().Pods(ns).Create(ctx, pod(fmt.Sprintf("late-%03d", i), 1), metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
				t.Errorf("creating a pod during the uninstall: %v", err)
				return
			}
		}
	}()
	uninstalled := make(chan error, 1)
	start := time.Now()
	go func() {
		out, err := helm("uninstall", "capscale", "--wait", "--timeout", "3m")
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, out)
		}
		uninstalled <- err
	}()
	runCleanupHook(ctx, t, p, "pre-delete")
	if err := <-uninstalled; err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	t.Logf("helm uninstall, its hook included, took %.1fs", time.Since(start).Seconds())
	close(stop)
	created.Wait()

	checkUninstalled(ctx, t, p)
	pods, err := p.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	late := 0
	for _, q := range pods.Items {
		if strings.HasPrefix(q.Name, "late-") {
			late++
		}
		want := []string(nil)
		if q.Name == "kept" {
			want = []string{"e2e/keep"}
		}
		if !slices.Equal(q.Finalizers, want) {
			t.Errorf("after helm uninstall pod %s/%s has finalizers %v, want %v", q.Namespace, q.Name, q.Finalizers, want)
		}
		if q.Name == "force" {
			t.Errorf("the force-deleted pod is still there: %+v", q.ObjectMeta)
		}
	}
	t.Logf("%d pods created during the uninstall", late)
	if late == 0 {
		t.Error("no pod was created during the uninstall")
	}
	// A namespace's deletion completes once the test's own finalizer goes.
	if _, err := p.Client.CoreV1().Pods(ns).Patch(ctx, "kept", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, p, ns)
}

// checkCleanupHook: helm install saw the cluster, so the release records
// the pre-delete hook, with deploy/native/release-cleanup.yaml's RBAC and
// command.
func checkCleanupHook(ctx context.Context, t *testing.T, helm func(...string) (string, error)) {
	t.Helper()
	out, err := helm("get", "hooks", "capscale")
	if err != nil {
		t.Fatalf("helm get hooks: %v\n%s", err, out)
	}
	plain, err := os.ReadFile(stack.DeployFile("native/release-cleanup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	hook, want := splitDocs(t, out), splitDocs(t, string(plain))
	var gotRole, wantRole rbacv1.ClusterRole
	var gotJob, wantJob batchv1.Job
	decodeDoc(t, hook, "ClusterRole", "capscale:release-cleanup", &gotRole)
	decodeDoc(t, want, "ClusterRole", "capscale:release-cleanup", &wantRole)
	decodeDoc(t, hook, "Job", "capscale-release-cleanup", &gotJob)
	decodeDoc(t, want, "Job", "capscale-release-cleanup", &wantJob)
	if !reflect.DeepEqual(gotRole.Rules, wantRole.Rules) {
		t.Errorf("the hook's ClusterRole %+v, deploy/native/release-cleanup.yaml's %+v", gotRole.Rules, wantRole.Rules)
	}
	if got := gotJob.Annotations["helm.sh/hook"]; got != "pre-delete" {
		t.Errorf("the cleanup Job's helm.sh/hook %q, want pre-delete", got)
	}
	g, w := gotJob.Spec.Template.Spec, wantJob.Spec.Template.Spec
	if !slices.Equal(g.Containers[0].Command, w.Containers[0].Command) || g.ServiceAccountName != w.ServiceAccountName {
		t.Errorf("the hook runs %v as %s, deploy/native/release-cleanup.yaml %v as %s",
			g.Containers[0].Command, g.ServiceAccountName, w.Containers[0].Command, w.ServiceAccountName)
	}
}

// helmUpgrade upgrades the release capscale with args.
func helmUpgrade(helm func(...string) (string, error), args []string) error {
	if out, err := helm(append([]string{"upgrade", "capscale"}, args...)...); err != nil {
		return fmt.Errorf("helm upgrade %v: %w\n%s", args, err, out)
	}
	return nil
}

// runCleanupHook does what the hook's pod would: once helm created it,
// `extender release-cleanup` with the hook ServiceAccount's token, then
// the pod's end. The Job must be the hook of type hook.
func runCleanupHook(ctx context.Context, t *testing.T, p *plane.Plane, hook string) {
	t.Helper()
	const sysNS = "capscale-system"
	var job *batchv1.Job
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if job, err = p.Client.BatchV1().Jobs(sysNS).Get(ctx, "capscale-release-cleanup", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		if got := job.Annotations["helm.sh/hook"]; got != hook {
			return false, fmt.Errorf("the cleanup Job is a %q hook, want %s", got, hook)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("helm made no %s cleanup Job: %v", hook, err)
	}
	var jobPod *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		// The Job's own pod: an earlier hook's may still be there.
		l, err := p.Client.CoreV1().Pods(sysNS).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/controller-uid=" + string(job.UID)})
		if err != nil || len(l.Items) == 0 {
			return false, nil
		}
		jobPod = &l.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("helm uninstall made no pod for its cleanup hook: %v", err)
	}
	kc, err := p.ServiceAccountKubeconfig(ctx, sysNS, "capscale-release-cleanup")
	if err != nil {
		t.Fatal(err)
	}
	c := jobPod.Spec.Containers[0]
	if len(c.Command) < 2 || c.Command[0] != "/extender" {
		t.Fatalf("the hook's command %v", c.Command)
	}
	// As the Job would: a failed run is retried up to its backoffLimit,
	// after the Job controller's back-off of 10s, doubled each time (the
	// hook's RBAC, created just before it, may reach the apiserver's
	// authorizer a moment after its pod starts).
	start := time.Now()
	for attempt := int32(0); ; attempt++ {
		cmd := exec.CommandContext(ctx, filepath.Join(capscaleBin, "extender"), append(c.Command[1:], "--kubeconfig="+kc)...)
		out, err := cmd.CombinedOutput()
		t.Logf("extender %s (%.1fs):\n%s", strings.Join(c.Command[1:], " "), time.Since(start).Seconds(), out)
		if err == nil {
			break
		}
		if job.Spec.BackoffLimit == nil || attempt >= *job.Spec.BackoffLimit {
			t.Fatalf("the cleanup hook failed %d times, its Job's backoffLimit: %v", attempt+1, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the cleanup hook failed (%v), and the test ended before its retry", err)
		case <-time.After(jobBackoff << attempt):
		}
	}
	// The scheduler writes the pod's status too (PodScheduled false): end
	// it on the pod as it is now.
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		q, err := p.Client.CoreV1().Pods(sysNS).Get(ctx, jobPod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q.ResourceVersion != jobPod.ResourceVersion {
			t.Logf("the hook's pod changed since it was listed (resourceVersion %s, now %s)", jobPod.ResourceVersion, q.ResourceVersion)
		}
		q.Status.Phase = corev1.PodSucceeded
		q.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				StartedAt: metav1.NewTime(start), FinishedAt: metav1.Now()}}}}
		_, err = p.Client.CoreV1().Pods(sysNS).UpdateStatus(ctx, q, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("ending the hook's pod: %v", err)
	}
}

// jobBackoff is the Job controller's first back-off before it retries a
// failed pod (pkg/controller/job, DefaultJobPodFailureBackOff, v1.37.2).
const jobBackoff = 10 * time.Second

// splitDocs splits a multi-document YAML stream.
func splitDocs(t *testing.T, s string) []map[string]any {
	t.Helper()
	var docs []map[string]any
	for _, d := range strings.Split(s, "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("decoding %q: %v", d, err)
		}
		if m != nil {
			docs = append(docs, m)
		}
	}
	return docs
}

// decodeDoc decodes the document of kind and name into out.
func decodeDoc(t *testing.T, docs []map[string]any, kind, name string, out any) {
	t.Helper()
	for _, d := range docs {
		meta, _ := d["metadata"].(map[string]any)
		if d["kind"] == kind && meta["name"] == name {
			b, err := yaml.Marshal(d)
			if err == nil {
				err = yaml.Unmarshal(b, out)
			}
			if err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %s %s among %d documents", kind, name, len(docs))
}
