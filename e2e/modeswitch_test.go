//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestModeSwitch moves a running cluster from extender mode to native mode
// and back, in docs/choosing-a-mode.md's order, with pods bound all along: no node is ever
// over capacity and the bound count stays exact.
func TestModeSwitch(t *testing.T) {
	s := startReuseStack(t, 6, "3")
	ctx := testContext(t, 8*time.Minute)
	capacity := map[string]int{}
	published := map[string]int64{}
	for i := range 6 {
		capacity[plane.NodeName(i)] = 3
		published[plane.NodeName(i)] = 3
	}
	const ns = "switch"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	scale := func(n int32) { t.Helper(); scaleDeployment(ctx, t, s, ns, "app", n) }
	// Extender mode: 20 pods on 18 IPs.
	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, "app", 20, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUnderlay(ctx, t, s, ns, capacity, 18, 2)

	// 1. Start the publisher beside the running extender and wait until
	// every node advertises its capacity.
	restartExtender(ctx, t, s, true)
	waitAllocatable(ctx, t, s, published, time.Minute)
	assertNeverOver(ctx, t, s, ns, capacity, time.Second)

	// 2. Switch kube-scheduler to the native configuration: the bound pods
	// count against the published capacity at once.
	native, err := os.ReadFile(stack.DeployFile("native/kube-scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RestartScheduler(ctx, string(native)); err != nil {
		t.Fatal(err)
	}
	scale(25)
	waitUnderlay(ctx, t, s, ns, capacity, 18, 7)
	waitPendingMessage(ctx, t, s, ns, "Insufficient "+names.UnderlayIPResource)
	assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)
	scale(15)
	waitUnderlay(ctx, t, s, ns, capacity, 15, 0)
	scale(22)
	waitUnderlay(ctx, t, s, ns, capacity, 18, 4)

	// And back: the extender configuration first, then the publisher off.
	ext, err := stack.SchedulerConfigWithExtender(stack.DeployFile("scheduler/kube-scheduler-config.yaml"), s.ExtenderURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RestartScheduler(ctx, ext); err != nil {
		t.Fatal(err)
	}
	restartExtender(ctx, t, s, false)
	scale(14)
	waitUnderlay(ctx, t, s, ns, capacity, 14, 0)
	scale(24)
	waitUnderlay(ctx, t, s, ns, capacity, 18, 6)
	assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)
}

// restartExtender stops the extender gracefully and starts it again with or
// without the capacity publisher (and its RBAC).
func restartExtender(ctx context.Context, t *testing.T, s *stack.Stack, publish bool) {
	t.Helper()
	if publish {
		if _, err := s.Kubectl(ctx, "apply", "-f", stack.DeployFile("native/rbac.yaml")); err != nil {
			t.Fatal(err)
		}
		s.Opts.ExtenderArgs = append(s.Opts.ExtenderArgs, "--publish-capacity", "--leader-elect-namespace="+stack.Namespace)
	} else {
		var keep []string
		for _, a := range s.Opts.ExtenderArgs {
			if a != "--publish-capacity" && a != "--leader-elect-namespace="+stack.Namespace {
				keep = append(keep, a)
			}
		}
		s.Opts.ExtenderArgs = keep
	}
	s.Extender.Stop(5 * time.Second)
	if err := s.StartExtender(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestModeSwitchPlugin moves a running cluster extender → plugin → native
// → plugin → extender (docs/plugin-mode.md), with pods bound
// all along: the bound count stays exact in every mode and no node is over
// capacity at any poll.
func TestModeSwitchPlugin(t *testing.T) {
	s := startReuseStack(t, 6, "3")
	ctx := testContext(t, 8*time.Minute)
	capacity := map[string]int{}
	published := map[string]int64{}
	for i := range 6 {
		capacity[plane.NodeName(i)] = 3
		published[plane.NodeName(i)] = 3
	}
	const ns = "switch-plugin"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	watch := watchOverCommit(ctx, s, ns, capacity)
	scale := func(n int32) { t.Helper(); scaleDeployment(ctx, t, s, ns, "app", n) }
	read := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(stack.DeployFile(rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	kubeScheduler := filepath.Join(s.Plane.Opts.BinDir, "kube-scheduler")
	capscaleScheduler := filepath.Join(s.Opts.BinDir, "capscale-scheduler")
	plugin := read("plugin/kube-scheduler-config.yaml")

	// Extender mode: 20 pods on 18 IPs.
	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, "app", 20, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUnderlay(ctx, t, s, ns, capacity, 18, 2)

	// extender → plugin: the pods the extender bound count at once.
	if err := s.RestartSchedulerWith(ctx, capscaleScheduler, plugin); err != nil {
		t.Fatal(err)
	}
	scale(25)
	waitUnderlay(ctx, t, s, ns, capacity, 18, 7)
	waitPendingMessage(ctx, t, s, ns, "underlay IPs exhausted: 3/3 used")
	scale(15)
	waitUnderlay(ctx, t, s, ns, capacity, 15, 0)
	scale(22)
	waitUnderlay(ctx, t, s, ns, capacity, 18, 4)

	// plugin → native: the publisher first (the plugin ignores what it
	// publishes), then kube-scheduler with the native configuration.
	restartExtender(ctx, t, s, true)
	waitAllocatable(ctx, t, s, published, time.Minute)
	if err := s.RestartSchedulerWith(ctx, kubeScheduler, read("native/kube-scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}
	scale(14)
	waitUnderlay(ctx, t, s, ns, capacity, 14, 0)
	scale(24)
	waitUnderlay(ctx, t, s, ns, capacity, 18, 6)
	waitPendingMessage(ctx, t, s, ns, "Insufficient "+names.UnderlayIPResource)

	// native → plugin: the scheduler first, then the publisher off; the
	// published capacity stays on the Nodes, ignored.
	if err := s.RestartSchedulerWith(ctx, capscaleScheduler, plugin); err != nil {
		t.Fatal(err)
	}
	restartExtender(ctx, t, s, false)
	scale(13)
	waitUnderlay(ctx, t, s, ns, capacity, 13, 0)
	scale(21)
	waitUnderlay(ctx, t, s, ns, capacity, 18, 3)

	// plugin → extender.
	ext, err := stack.SchedulerConfigWithExtender(stack.DeployFile("scheduler/kube-scheduler-config.yaml"), s.ExtenderURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RestartSchedulerWith(ctx, kubeScheduler, ext); err != nil {
		t.Fatal(err)
	}
	scale(12)
	waitUnderlay(ctx, t, s, ns, capacity, 12, 0)
	scale(20)
	waitUnderlay(ctx, t, s, ns, capacity, 18, 2)
	assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)
	watch.check(t)
}

// scaleDeployment sets ns/name's replicas through its scale subresource.
// The Deployment controller writes the object too: a conflict is retried.
func scaleDeployment(ctx context.Context, t *testing.T, s *stack.Stack, ns, name string, n int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := s.Client.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		sc.Spec.Replicas = n
		_, err = s.Client.AppsV1().Deployments(ns).UpdateScale(ctx, name, sc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("scaling %s/%s to %d: %v", ns, name, n, err)
	}
}
