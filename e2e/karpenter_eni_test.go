//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/capscale/capscale/e2e/ipamcrd"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// eniMaxPodIPs is what an m5.large's ENI pool holds for pods at most:
// 3 ENIs of 10 addresses less each ENI's primary (Cilium v1.20.2
// pkg/aws/ipam/node_stat_test.go: 27), less the agent's router and health.
const eniMaxPodIPs = 25

// TestKarpenterENIGrowth is issue 55 §4's Karpenter with a pool that grows:
// every node's ENI pool is grown by cilium-operator v1.20.2's own ENI IPAM
// against Cilium's mock EC2 API (ciliumcheck/enipool, a v1.19-style agent
// beside it with pre-allocate 8), capscale reads it with the cilium-eni
// preset (native mode), and the NodeOverlay says what the instance can hold
// at most (25). A node starts with 8 free IPs; the operator grows the pool
// as pods land, 8 ahead, to 25. Karpenter plans new nodes on the overlay's
// 25, but sees each node it launched at what the pool holds now. The test
// reports how many nodes it launches against the minimum the pods need once
// every pool has grown, and fails on a node over its pool at any poll, a
// pod left unbound, or an endpoint the agent found no IP for.
func TestKarpenterENIGrowth(t *testing.T) {
	bin := buildENIPool(t)
	o := stack.Options{Native: true, CapacitySources: "sources:\n- name: cilium\n  preset: cilium-eni\n"}
	var grower *plane.Process
	o.Prepare = func(ctx context.Context, s *stack.Stack) (err error) {
		if err := upstreamCRD(ipamcrd.CiliumNode)(ctx, s); err != nil {
			return err
		}
		grower, err = s.StartProcess("enipool", bin, "--kubeconfig="+s.Kubeconfig, "--pre-allocate=8")
		return err
	}
	ctx, w := startKarpenterStack(t, o, `[{"op":"remove","path":"/spec/template/metadata/labels/capscale.io~1underlay-ip-capacity"}]`)
	if out, err := w.s.Kubectl(ctx, "patch", "nodeoverlay", "capscale-underlay-ip-c-4x-amd64-linux", "--type=merge",
		"-p", fmt.Sprintf(`{"spec":{"capacity":{%q:"%d"}}}`, names.UnderlayIPResource, eniMaxPodIPs)); err != nil {
		t.Fatalf("patching the NodeOverlay: %v\n%s", err, out)
	}
	w.limit = 4 * time.Minute
	w.capacity = eniPoolCapacity(w.dyn)
	for i := range karpenterStaticNodes {
		waitMirrored(ctx, t, w.s, plane.NodeName(i), is(8), 8)
	}

	const replicas = 100
	want := minNodes(replicas-karpenterStaticNodes*eniMaxPodIPs, eniMaxPodIPs)
	g := w.grow(ctx, t, "eni", replicas, podNeeds(1, "100m"), "Insufficient "+names.UnderlayIPResource)
	pools := map[string]int{}
	caps, err := w.capacity(ctx, w.launchedNodes(ctx, t))
	if err != nil {
		t.Fatal(err)
	}
	for n, c := range caps {
		pools[n] = c
	}
	// Where the pods are: the plane's nodes and each launched one.
	pods, err := w.s.Client.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onNode := map[string]int{}
	for _, q := range pods.Items {
		onNode[q.Spec.NodeName]++
	}
	if g.launched < want {
		t.Errorf("%d nodes launched, fewer than the %d the pods need: impossible without over-commit", g.launched, want)
	}
	logged, err := os.ReadFile(grower.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(logged), `msg="no IP"`); n > 0 {
		t.Errorf("the agent found no IP for %d endpoints: a pod was bound beyond its node's pool", n)
	}
	t.Logf("karpenter-growth mode=native source=cilium-eni(enipool, pre-allocate 8, max %d) launched=%d minimum=%d pending-to-bound=%.1fs launched-pools=%v pods-per-node=%v",
		eniMaxPodIPs, g.launched, want, g.took.Seconds(), pools, onNode)
	w.shrink(ctx, t, "eni", 0)
}

// buildENIPool builds ciliumcheck's enipool command (its own module:
// Cilium's dependencies stay out of capscale's).
func buildENIPool(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "enipool")
	unlock, err := buildLock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/enipool")
	cmd.Dir = filepath.Join(plane.RepoRoot(), "controller", "capacitysource", "ciliumcheck")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building ciliumcheck's enipool: %v\n%s", err, out)
	}
	return bin
}

var ciliumNodesResource = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"}

// eniPoolCapacity is what each node's pool can give pods now: its
// CiliumNode's spec.ipam.pool less the agent's router and health (the
// v1.19 agent's CRD allocator hands out the pool and nothing else); 0 for a
// node without one.
func eniPoolCapacity(dyn dynamic.Interface) func(ctx context.Context, nodes []corev1.Node) (map[string]int, error) {
	return func(ctx context.Context, nodes []corev1.Node) (map[string]int, error) {
		list, err := dyn.Resource(ciliumNodesResource).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		pool := map[string]int{}
		for _, cn := range list.Items {
			spec, _ := cn.Object["spec"].(map[string]any)
			ipam, _ := spec["ipam"].(map[string]any)
			p, _ := ipam["pool"].(map[string]any)
			pool[cn.GetName()] = max(len(p)-2, 0)
		}
		out := map[string]int{}
		for _, n := range nodes {
			out[n.Name] = pool[n.Name]
		}
		return out, nil
	}
}
