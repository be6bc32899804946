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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/extender/devices"
)

// noPlugin is what the kubelet says (FailedPrepareDynamicResources) of a
// pod whose claim holds devices of a driver with no registered plugin and
// no skipNodeOperations: pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go
// (GetPlugin) in the words of kuberuntime_manager.go's event.
const noPlugin = "DRA driver " + devices.Driver + " is not registered"

// TestRealNodeDRAKubeletPlugin is DRA mode on real nodes as a cluster
// without alpha gates runs it (docs/dra.md): no DRAOptionalNodeOperations
// anywhere, the slices unmarked, and capscale's kubelet plugin (extender
// kubelet-plugin, as the chart's DaemonSet runs it, with the RBAC of
// deploy/dra/kubelet-plugin.yaml) beside each kubelet, as host processes.
// First without the plugin, on the ungated path (the stack's extender runs
// without --kubelet-plugin-selector, as it must where no plugin pod
// exists): a pod with an IP is bound and its kubelet cannot start it,
// saying so; this is what the gate prevents, and why the chart and
// deploy/dra turn it on (TestRealNodeDRAPluginFailSafe holds the gated
// path, with the plugin as the chart's pods). Then the plugins start and a
// pod with an IP runs. Then
// TestRealNodePrevented's scenario: 25 pods for 2 nodes of 10 IPs, 20
// Running, 5 Pending with the scheduler's reason, a freed IP reused three
// times, the IPAM never over.
func TestRealNodeDRAKubeletPlugin(t *testing.T) {
	s := startRealNodeStack(t, stack.Options{DRA: true}, 2)
	ctx := testContext(t, 6*time.Minute)

	for _, n := range s.RealNodes {
		node, err := s.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(node.Status.DeclaredFeatures, devices.OptionalNodeOperationsFeature) {
			t.Fatalf("%s declares %s: this test runs without the alpha gate", n.Name, devices.OptionalNodeOperationsFeature)
		}
	}

	// Without the plugin and without the gate: bound, and the kubelet
	// cannot prepare the claim.
	const probeNS = "dra-no-plugin"
	if err := s.WaitForNamespace(ctx, probeNS); err != nil {
		t.Fatal(err)
	}
	probe := realPod(probeNS, "probe", 1)
	createPods(ctx, t, s, probe)
	msg := waitKubeletEvent(ctx, t, s, probeNS, probe.Name, "FailedPrepareDynamicResources", noPlugin)
	t.Logf("without the kubelet plugin, the kubelet says: %s", msg)

	// The kubelet retries that pod only after a backoff of a minute or more:
	// a new pod shows the plugin at work sooner.
	deleteAndWaitGone(ctx, t, s, probeNS, probe.Name)
	plugins := startKubeletPlugins(ctx, t, s)
	started := time.Now()
	again := realPod(probeNS, "probe-again", 1)
	createPods(ctx, t, s, again)
	waitRealState(ctx, t, s, probeNS, 2*time.Minute, "a pod with an IP Running once the plugins run", func(st realState) bool {
		return st.runningCount() == 1
	})
	t.Logf("with the plugins registered, a pod with an IP ran %.1fs after its creation", time.Since(started).Seconds())
	deleteAndWaitGone(ctx, t, s, probeNS, again.Name)
	checkSlicesUnmarked(ctx, t, s)

	// With the plugin: TestRealNodePrevented's scenario.
	preventedScenario(ctx, t, s, "dra-plugin", "DRA mode with the kubelet plugin", realExhausted["dra"])
	checkSlicesUnmarked(ctx, t, s)
	// Each kubelet called its plugin: the pods ran through it.
	for _, p := range plugins {
		log, err := os.ReadFile(p.LogFile)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(log), "Prepared a claim"); n < 10 {
			t.Errorf("%s prepared %d claims, want at least 10 (the pods it ran)", p.LogFile, n)
		}
	}
}

// startKubeletPlugins applies deploy/dra/kubelet-plugin.yaml's
// ServiceAccount and RBAC (not its DaemonSet: the image is not on these
// nodes) and runs `extender kubelet-plugin` for each real node with that
// identity, on the node's kubelet's registry directory, and waits until
// each kubelet has registered it (its registration socket answered and
// the kubelet dialled the plugin's socket).
func startKubeletPlugins(ctx context.Context, t *testing.T, s *stack.Stack) []*plane.Process {
	t.Helper()
	b, err := os.ReadFile(stack.DeployFile("dra/kubelet-plugin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, doc := range strings.Split(string(b), "\n---\n") {
		if !strings.Contains(doc, "\nkind: DaemonSet\n") {
			keep = append(keep, doc)
		}
	}
	rbac := filepath.Join(t.TempDir(), "kubelet-plugin-rbac.yaml")
	if err := os.WriteFile(rbac, []byte(strings.Join(keep, "\n---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Kubectl(ctx, "apply", "-f", rbac); err != nil {
		t.Fatalf("applying the kubelet plugin's RBAC: %v\n%s", err, out)
	}
	kc, err := s.ServiceAccountKubeconfig(ctx, stack.Namespace, "capscale-dra-kubelet-plugin")
	if err != nil {
		t.Fatal(err)
	}
	var procs []*plane.Process
	for _, n := range s.RealNodes {
		root := filepath.Join(n.Dir, "kubelet")
		dir := filepath.Join(root, "plugins", devices.Driver)
		proc, err := s.StartProcess("kubelet-plugin-"+n.Name, filepath.Join(capscaleBin, "extender"), "kubelet-plugin",
			"--kubeconfig="+kc, "--node-name="+n.Name, "--v=2",
			"--kubelet-registry-dir="+filepath.Join(root, "plugins_registry"), "--plugin-dir="+dir)
		if err != nil {
			t.Fatal(err)
		}
		// The kubelet logs nothing at --v=1 when it registers a plugin; the
		// plugin logs the kubelet's answer (NotifyRegistrationStatus).
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			if exited, err := proc.Exited(); exited {
				return false, fmt.Errorf("the kubelet plugin of %s exited: %v\n%s", n.Name, err, proc.Tail(20))
			}
			log, _ := os.ReadFile(proc.LogFile)
			return strings.Contains(string(log), "Registered with the kubelet"), nil
		})
		if err != nil {
			t.Fatalf("the kubelet of %s did not register the plugin: %v\n%s", n.Name, err, proc.Tail(20))
		}
		procs = append(procs, proc)
	}
	return procs
}

// waitKubeletEvent waits for an event of reason about pod whose message
// contains want, and returns the message.
func waitKubeletEvent(ctx context.Context, t *testing.T, s *stack.Stack, ns, pod, reason, want string) string {
	t.Helper()
	return waitEventSaying(ctx, t, s, ns, "reason="+reason+",involvedObject.name="+pod, want, 2*time.Minute)
}

// deleteAndWaitGone deletes a pod and waits until it has left the API
// (its kubelet stopped it, and the release finalizer let it go).
func deleteAndWaitGone(ctx context.Context, t *testing.T, s *stack.Stack, ns, name string) {
	t.Helper()
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s never left: %v", ns, name, err)
	}
}

// checkSlicesUnmarked: with the plugin, no slice of capscale's driver
// says its devices need no kubelet plugin.
func checkSlicesUnmarked(ctx context.Context, t *testing.T, s *stack.Stack) {
	t.Helper()
	slices, err := s.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + devices.Driver})
	if err != nil {
		t.Fatal(err)
	}
	if len(slices.Items) == 0 {
		t.Error("no ResourceSlice of " + devices.Driver)
	}
	for _, sl := range slices.Items {
		if len(sl.Spec.SkipNodeOperations) > 0 {
			t.Errorf("slice %s skips node operations %v, with the kubelet plugin running", sl.Name, sl.Spec.SkipNodeOperations)
		}
	}
}
