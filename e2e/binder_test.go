//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/extender/binderlease"
)

// TestSecondBinderRefused is issue 31's double ledger: the cluster's
// scheduler with the extender (binder ID default-scheduler) and a dedicated
// capscale-scheduler with its own extender (binder ID capscale-scheduler)
// both schedule the same underlay pods. Each extender re-checks only its
// own ledger, so without the binder lease two binds in flight could fill
// one last IP twice. With it, the second binder refuses every bind and
// says who holds the lease (pod events, its metric, an Event on the
// Lease); no node is over capacity at any poll; and once the first binder
// is gone for a lease duration, the second takes over.
func TestSecondBinderRefused(t *testing.T) {
	po, capacity, total := underlayPlane(t)
	s := startStack(t, stack.Options{Plane: po, Extender: true, ExtenderArgs: []string{"--binder-id=default-scheduler"}})
	ctx := testContext(t, 10*time.Minute)
	const ns = "binders"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	waitLeaseHolder(ctx, t, s, "default-scheduler")

	// 1. Only the dedicated scheduler runs: its extender refuses every
	// bind, naming the holder, and nothing is bound.
	stopPlaneScheduler(s)
	dedicated, err := s.StartSchedulerReplicaWith(ctx, "dedicated", "--binder-id=capscale-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	watch := watchOverCommit(ctx, s, ns, capacity)
	d := SimpleDeployment(ns, "web", int32(total+10), underlayRequest(1))
	d.Spec.Template.Spec.SchedulerName = "capscale-scheduler"
	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const refusal = `"default-scheduler", holds the Lease capscale-system/capscale-underlay-binder`
	msg := waitPodEvent(ctx, t, s, ns, refusal)
	t.Logf("a pod's scheduling event: %s", msg)
	if _, bound, _, err := underlayUsage(ctx, s, ns); err != nil || bound != 0 {
		t.Fatalf("bound underlay pods while only the refused binder schedules = %d (%v), want 0", bound, err)
	}
	if got := scrapeCounterAt(ctx, t, dedicated.ExtenderURL, `capscale_extender_binds_total{result="not_binder"}`); got < 1 {
		t.Errorf("the dedicated extender's not_binder binds = %v, want at least 1", got)
	}
	if got := scrapeCounterAt(ctx, t, dedicated.ExtenderURL, `capscale_extender_binder_lease_held`); got != 0 {
		t.Errorf("the dedicated extender's binder_lease_held = %v, want 0", got)
	}
	waitLeaseEvent(ctx, t, s, "UnderlayIPBinderConflict")

	// 2. Both schedulers run: the holder binds exactly the IPs there are.
	if err := s.RestartScheduler(ctx, s.Opts.Plane.SchedulerConfig); err != nil {
		t.Fatal(err)
	}
	waitUnderlay(ctx, t, s, ns, capacity, total, 10)
	if got := scrapeCounterAt(ctx, t, dedicated.ExtenderURL, `capscale_extender_binds_total{result="bound"}`); got != 0 {
		t.Errorf("the refused extender bound %v pods", got)
	}

	// 3. The first binder goes away: after a lease duration of silence the
	// dedicated scheduler's extender takes over and fills freed IPs.
	stopPlaneScheduler(s)
	s.KillExtender()
	waitLeaseHolder(ctx, t, s, "capscale-scheduler")
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName!="})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items[:5] {
		if err := s.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	waitUnderlay(ctx, t, s, ns, capacity, total, 10)
	if got := scrapeCounterAt(ctx, t, dedicated.ExtenderURL, `capscale_extender_binds_total{result="bound"}`); got < 5 {
		t.Errorf("the extender that took over bound %v pods, want at least 5", got)
	}
	watch.check(t)
}

// stopPlaneScheduler stops the plane's own kube-scheduler.
func stopPlaneScheduler(s *stack.Stack) {
	for _, p := range s.Processes() {
		if p.Name == "kube-scheduler" {
			p.Stop(5 * time.Second)
		}
	}
}

// waitLeaseHolder waits until the binder lease names holder.
func waitLeaseHolder(ctx context.Context, t *testing.T, s *stack.Stack, holder string) {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := s.Client.CoordinationV1().Leases(stack.Namespace).Get(ctx, binderlease.Name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		got = *l.Spec.HolderIdentity
		return got == holder, nil
	})
	if err != nil {
		t.Fatalf("binder lease holder = %q, want %q: %v", got, holder, err)
	}
}

// waitPodEvent waits for an event on a pod of ns whose message contains
// want, and returns that message.
func waitPodEvent(ctx context.Context, t *testing.T, s *stack.Stack, ns, want string) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Pod" && strings.Contains(e.Message, want) {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no pod event in %s containing %q: %v", ns, want, err)
	}
	return msg
}

// waitLeaseEvent waits for an Event with reason on the binder lease.
func waitLeaseEvent(ctx context.Context, t *testing.T, s *stack.Stack, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := s.Client.CoreV1().Events(stack.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Lease" && e.InvolvedObject.Name == binderlease.Name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				t.Logf("Event on the Lease: %s", e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on the binder lease: %v", reason, err)
	}
}
