//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// kube-scheduler v1.37.2 (pkg/scheduler/util/pod_resources.go) counts a
// container that requests no CPU or memory as requesting these when it
// scores with NodeResourcesFit (NonZeroRequested; resource_allocation.go).
const (
	nonZeroMilliCPU = 100
	nonZeroMemory   = 200 << 20
)

// fitState is what NodeResourcesFit's score reads of one node: allocatable
// and requested (non-zero for CPU and memory) of each resource.
type fitState struct {
	cpuAlloc, cpuReq int64 // millicores
	memAlloc, memReq int64
	ipAlloc, ipReq   int64
}

// fitWeights are the scoringStrategy resources of NodeResourcesFit in a
// KubeSchedulerConfiguration file, by resource name.
func fitWeights(t *testing.T, file string) (strategy string, weights map[string]int64) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			PluginConfig  []struct {
				Name string `json:"name"`
				Args struct {
					ScoringStrategy struct {
						Type      string `json:"type"`
						Resources []struct {
							Name   string `json:"name"`
							Weight int64  `json:"weight"`
						} `json:"resources"`
					} `json:"scoringStrategy"`
				} `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("parsing %s: %v", file, err)
	}
	for _, p := range cfg.Profiles {
		for _, pc := range p.PluginConfig {
			if p.SchedulerName != "default-scheduler" || pc.Name != "NodeResourcesFit" {
				continue
			}
			weights = map[string]int64{}
			for _, r := range pc.Args.ScoringStrategy.Resources {
				weights[r.Name] = r.Weight
			}
			return pc.Args.ScoringStrategy.Type, weights
		}
	}
	t.Fatalf("%s configures no NodeResourcesFit scoring for default-scheduler", file)
	return "", nil
}

// leastAllocatedScore is NodeResourcesFit's LeastAllocated score of a node
// for a pod that asks one underlay IP and no CPU or memory, transcribed from
// kube-scheduler v1.37.2 (noderesources/least_allocated.go:
// leastResourceScorer, leastRequestedScore): per resource
// (allocatable - requested) * 100 / allocatable in integer arithmetic, with
// requested including the pod's own request, then the weighted mean
// (integer division). A resource the node has none of is left out.
func leastAllocatedScore(n fitState, weights map[string]int64) int64 {
	least := func(req, alloc int64) int64 {
		if req > alloc {
			return 0
		}
		return (alloc - req) * 100 / alloc
	}
	var score, sum int64
	for _, r := range []struct {
		name       string
		req, alloc int64
	}{
		{string(corev1.ResourceCPU), n.cpuReq + nonZeroMilliCPU, n.cpuAlloc},
		{string(corev1.ResourceMemory), n.memReq + nonZeroMemory, n.memAlloc},
		{names.UnderlayIPResource, n.ipReq + 1, n.ipAlloc},
	} {
		w, ok := weights[r.name]
		if !ok || r.alloc == 0 {
			continue
		}
		score += least(r.req, r.alloc) * w
		sum += w
	}
	if sum == 0 {
		return 0
	}
	return score / sum
}

// TestNativeRanking shows what native mode ranks underlay pods by, on 100
// kwok nodes (kube-scheduler scores every feasible node up to 100; above,
// it samples). Half the nodes have 10 underlay IPs and 30 of their 32 CPUs
// requested by a plain pod; the other half have 6 IPs and idle CPUs. "Most
// free IPs first" would put the first 50 underlay pods on the busy nodes.
// Native mode's kube-scheduler scores NodeResourcesFit's LeastAllocated
// over CPU, memory and underlay IPs with deploy/native's weights, and the
// other default scores are equal on every node for these pods (no
// affinity, taints, images or spreading; BalancedAllocation skips a pod
// that requests no CPU or memory). Each pod, placed one at a time, must land
// on a node with the highest score of that formula; and the formula, with
// these nodes, must prefer an idle node with fewer free IPs.
func TestNativeRanking(t *testing.T) {
	const nodes, busy, pods = 100, 50, 60
	capacity := func(i int) int64 {
		if i < busy {
			return 10
		}
		return 6
	}
	strategy, weights := fitWeights(t, stack.DeployFile("native/kube-scheduler-config.yaml"))
	if strategy != "LeastAllocated" {
		t.Fatalf("deploy/native scores with %q; this test models LeastAllocated", strategy)
	}
	t.Logf("NodeResourcesFit LeastAllocated weights: %v", weights)
	s := startStack(t, stack.Options{
		Plane: plane.Options{Nodes: nodes, Logf: t.Logf, Node: func(i int, n *corev1.Node) {
			n.Annotations[names.UnderlayIPCapacityAnnotation] = strconv.FormatInt(capacity(i), 10)
		}},
		Native: true,
	})
	ctx := testContext(t, 10*time.Minute)
	want := map[string]int64{}
	for i := range nodes {
		want[plane.NodeName(i)] = capacity(i)
	}
	waitAllocatable(ctx, t, s, want, 2*time.Minute)
	// A node is created with the not-ready taint and Ready before
	// kube-controller-manager lifts it, a hundred nodes taking a while: a
	// tainted node is no candidate, and the model scores every node.
	var tainted int
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		tainted = 0
		for _, n := range list.Items {
			if len(n.Spec.Taints) > 0 {
				tainted++
			}
		}
		return tainted == 0, nil
	})
	if err != nil {
		t.Fatalf("%d nodes still tainted: %v", tainted, err)
	}

	// The busy nodes' CPU: one plain pod each, bound by name.
	const plainNS, ns = "cpu", "ranking"
	for _, n := range []string{plainNS, ns} {
		if err := s.WaitForNamespace(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	var plain []*corev1.Pod
	for i := range busy {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: plainNS, Name: fmt.Sprintf("cpu-%03d", i), Labels: map[string]string{"app": "cpu"}},
			Spec: corev1.PodSpec{NodeName: plane.NodeName(i), TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/capscale/fake:1",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("30")}}}}},
		}
		plain = append(plain, p)
	}
	createPods(ctx, t, s, plain...)
	WaitForRunningPods(ctx, t, s.Plane, plainNS, "app=cpu", busy)

	state := map[string]*fitState{}
	list, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list.Items {
		if len(n.Spec.Taints) > 0 {
			t.Fatalf("node %s tainted again: %v", n.Name, n.Spec.Taints)
		}
		a := n.Status.Allocatable
		state[n.Name] = &fitState{cpuAlloc: a.Cpu().MilliValue(), memAlloc: a.Memory().Value(),
			ipAlloc: a.Name(names.UnderlayIPResource, resource.DecimalSI).Value()}
	}
	for _, p := range plain {
		st := state[p.Spec.NodeName]
		st.cpuReq += p.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
		st.memReq += nonZeroMemory // requests no memory
	}

	// One at a time, so that each pod is scored against the placements
	// before it, as the model is.
	againstMostFree := 0
	for i := range pods {
		var best []string
		var bestScore int64 = -1
		mostFree := int64(0)
		for name, st := range state {
			mostFree = max(mostFree, st.ipAlloc-st.ipReq)
			switch sc := leastAllocatedScore(*st, weights); {
			case sc > bestScore:
				best, bestScore = []string{name}, sc
			case sc == bestScore:
				best = append(best, name)
			}
		}
		p := underlayPod(ns, fmt.Sprintf("r%03d", i), "ranking")
		createPods(ctx, t, s, p)
		node := waitNodeName(ctx, t, s, ns, p.Name)
		st := state[node]
		if !slices.Contains(best, node) {
			t.Fatalf("pod %s went to %s (score %d: %d of %d IPs free, %dm of %dm CPU requested); LeastAllocated's best score is %d on %d nodes, e.g. %s",
				p.Name, node, leastAllocatedScore(*st, weights), st.ipAlloc-st.ipReq, st.ipAlloc, st.cpuReq, st.cpuAlloc, bestScore, len(best), best[0])
		}
		if free := st.ipAlloc - st.ipReq; free < mostFree {
			againstMostFree++
			if againstMostFree == 1 {
				t.Logf("pod %s: native mode chose %s with %d free IPs and %dm of %dm CPU requested; most free IPs first would choose a node with %d",
					p.Name, node, free, st.cpuReq, st.cpuAlloc, mostFree)
			}
		}
		st.ipReq++
		st.cpuReq += nonZeroMilliCPU
		st.memReq += nonZeroMemory
	}
	perGroup := map[string]int64{}
	for i := range nodes {
		group := "idle (6 IPs)"
		if i < busy {
			group = "busy (10 IPs, 30/32 CPU)"
		}
		perGroup[group] += state[plane.NodeName(i)].ipReq
	}
	t.Logf("%d underlay pods: %v; %d placed where most free IPs first would not", pods, perGroup, againstMostFree)
	if againstMostFree == 0 {
		t.Errorf("every pod went to a node with the most free IPs: this setup no longer shows CPU use outranking free IPs")
	}
}
