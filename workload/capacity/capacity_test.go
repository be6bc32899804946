package capacity

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/internal/names"
)

type nodeOpt func(*corev1.Node)

func node(name, cpu, mem string, pods int64, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(cpu),
				corev1.ResourceMemory: resource.MustParse(mem),
				corev1.ResourcePods:   *resource.NewQuantity(pods, resource.DecimalSI),
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func unschedulable(n *corev1.Node) { n.Spec.Unschedulable = true }
func notReady(n *corev1.Node)      { n.Status.Conditions[0].Status = corev1.ConditionFalse }
func noConditions(n *corev1.Node)  { n.Status.Conditions = nil }
func taint(key string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: "x", Effect: effect})
	}
}
func label(k, v string) nodeOpt { return func(n *corev1.Node) { n.Labels[k] = v } }
func ipCapacity(v string) nodeOpt {
	return func(n *corev1.Node) {
		n.Annotations = map[string]string{names.UnderlayIPCapacityAnnotation: v}
	}
}

func container(req corev1.ResourceList, lim corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func template(cs ...corev1.Container) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: cs}}
}

func pod(nodeName string, phase corev1.PodPhase, req corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + nodeName},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{container(req, nil)}},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

func TestCompute(t *testing.T) {
	oneCPU := template(container(rl("cpu", "1", "memory", "1Gi"), nil))
	tests := []struct {
		name         string
		tmpl         corev1.PodTemplateSpec
		nodes        []*corev1.Node
		pods         []*corev1.Pod
		defaultIPs   int64
		want         int64
		wantLimiting Resource
		wantExcluded map[string]string // node → substring of the reason
	}{
		{
			name: "fragmentation: three nodes with 1.5 free CPUs hold three 1-CPU pods, not four",
			tmpl: oneCPU,
			nodes: []*corev1.Node{
				node("a", "2", "64Gi", 110), node("b", "2", "64Gi", 110), node("c", "2", "64Gi", 110),
			},
			pods: []*corev1.Pod{
				pod("a", corev1.PodRunning, rl("cpu", "500m")),
				pod("b", corev1.PodRunning, rl("cpu", "500m")),
				pod("c", corev1.PodPending, rl("cpu", "500m")),
			},
			want:         3,
			wantLimiting: CPU,
		},
		{
			name:         "terminal pods free their requests",
			tmpl:         oneCPU,
			nodes:        []*corev1.Node{node("a", "2", "64Gi", 110)},
			pods:         []*corev1.Pod{pod("a", corev1.PodSucceeded, rl("cpu", "2")), pod("a", corev1.PodFailed, rl("cpu", "2"))},
			want:         2,
			wantLimiting: CPU,
		},
		{
			name:         "unbound and foreign-node pods are ignored",
			tmpl:         oneCPU,
			nodes:        []*corev1.Node{node("a", "2", "64Gi", 110)},
			pods:         []*corev1.Pod{pod("", corev1.PodPending, rl("cpu", "2")), pod("gone", corev1.PodRunning, rl("cpu", "2"))},
			want:         2,
			wantLimiting: CPU,
		},
		{
			name:         "memory is the limit",
			tmpl:         template(container(rl("cpu", "100m", "memory", "3Gi"), nil)),
			nodes:        []*corev1.Node{node("a", "8", "10Gi", 110)},
			want:         3,
			wantLimiting: Memory,
		},
		{
			name:         "pod slots are the limit",
			tmpl:         template(container(rl("cpu", "10m"), nil)),
			nodes:        []*corev1.Node{node("a", "8", "10Gi", 3)},
			pods:         []*corev1.Pod{pod("a", corev1.PodRunning, nil)},
			want:         2,
			wantLimiting: Pods,
		},
		{
			name:         "a best-effort template is bounded by pod slots only",
			tmpl:         template(container(nil, nil)),
			nodes:        []*corev1.Node{node("a", "1", "1Gi", 5), node("b", "1", "1Gi", 7)},
			want:         12,
			wantLimiting: Pods,
		},
		{
			name: "underlay IPs are the limit: annotation capacity and default",
			tmpl: template(container(rl("cpu", "100m"), rl(names.UnderlayIPResource, "1"))),
			nodes: []*corev1.Node{
				node("a", "8", "10Gi", 110, ipCapacity("2")),
				node("b", "8", "10Gi", 110),
			},
			pods: []*corev1.Pod{
				pod("a", corev1.PodRunning, rl(names.UnderlayIPResource, "1")),
				pod("b", corev1.PodRunning, rl(names.UnderlayIPResource, "1")),
			},
			defaultIPs:   4,
			want:         1 + 3,
			wantLimiting: UnderlayIP,
		},
		{
			// A node pool's capacity survives the Node's re-creation.
			name:         "the capacity label counts, the annotation overrides it",
			tmpl:         template(container(nil, rl(names.UnderlayIPResource, "1"))),
			nodes:        []*corev1.Node{node("a", "8", "10Gi", 110, label(names.UnderlayIPCapacityLabel, "3")), node("b", "8", "10Gi", 110, label(names.UnderlayIPCapacityLabel, "3"), ipCapacity("1"))},
			defaultIPs:   10,
			want:         3 + 1,
			wantLimiting: UnderlayIP,
		},
		{
			// As the extender sees it: such a node gets no underlay pod.
			name:         "invalid IP capacity annotation counts as 0, like the extender",
			tmpl:         template(container(nil, rl(names.UnderlayIPResource, "2"))),
			nodes:        []*corev1.Node{node("a", "8", "10Gi", 110, ipCapacity("lots")), node("b", "8", "10Gi", 110, ipCapacity(" 4 "))},
			want:         2, // a: 0; b: 4 / 2
			wantLimiting: UnderlayIP,
		},
		{
			name:         "IPs are not checked for templates that do not request them",
			tmpl:         oneCPU,
			nodes:        []*corev1.Node{node("a", "4", "64Gi", 110, ipCapacity("0"))},
			want:         4,
			wantLimiting: CPU,
		},
		{
			name: "unschedulable and NotReady nodes count zero",
			tmpl: oneCPU,
			nodes: []*corev1.Node{
				node("a", "4", "64Gi", 110, unschedulable),
				node("b", "4", "64Gi", 110, notReady),
				node("c", "4", "64Gi", 110, noConditions),
				node("d", "4", "64Gi", 110),
			},
			want:         4,
			wantLimiting: CPU,
			wantExcluded: map[string]string{"a": "unschedulable", "b": "NotReady", "c": "NotReady"},
		},
		{
			name: "untolerated NoSchedule and NoExecute taints exclude; PreferNoSchedule does not",
			tmpl: oneCPU,
			nodes: []*corev1.Node{
				node("a", "4", "64Gi", 110, taint("dedicated", corev1.TaintEffectNoSchedule)),
				node("b", "4", "64Gi", 110, taint("dedicated", corev1.TaintEffectNoExecute)),
				node("c", "4", "64Gi", 110, taint("dedicated", corev1.TaintEffectPreferNoSchedule)),
			},
			want:         4,
			wantLimiting: CPU,
			wantExcluded: map[string]string{"a": "dedicated=x:NoSchedule", "b": "NoExecute"},
		},
		{
			name: "tolerated taints do not exclude",
			tmpl: func() corev1.PodTemplateSpec {
				t := template(container(rl("cpu", "1"), nil))
				t.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
				return t
			}(),
			nodes:        []*corev1.Node{node("a", "4", "64Gi", 110, taint("dedicated", corev1.TaintEffectNoSchedule))},
			want:         4,
			wantLimiting: CPU,
		},
		{
			name: "nodeSelector excludes non-matching nodes",
			tmpl: func() corev1.PodTemplateSpec {
				t := template(container(rl("cpu", "1"), nil))
				t.Spec.NodeSelector = map[string]string{"pool": "web"}
				return t
			}(),
			nodes: []*corev1.Node{
				node("a", "4", "64Gi", 110, label("pool", "web")),
				node("b", "4", "64Gi", 110, label("pool", "db")),
				node("c", "4", "64Gi", 110),
			},
			want:         4,
			wantLimiting: CPU,
			wantExcluded: map[string]string{"b": "nodeSelector", "c": "nodeSelector"},
		},
		{
			name: "required node affinity excludes non-matching nodes",
			tmpl: func() corev1.PodTemplateSpec {
				t := template(container(rl("cpu", "1"), nil))
				t.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}},
					}}},
				}}
				return t
			}(),
			nodes: []*corev1.Node{
				node("a", "4", "64Gi", 110, label("zone", "z1")),
				node("b", "4", "64Gi", 110, label("zone", "z2")),
			},
			want:         4,
			wantLimiting: CPU,
			wantExcluded: map[string]string{"b": "affinity"},
		},
		{
			name: "overcommitted node has zero free, not negative",
			tmpl: oneCPU,
			nodes: []*corev1.Node{
				node("a", "1", "64Gi", 110), node("b", "2", "64Gi", 110),
			},
			pods:         []*corev1.Pod{pod("a", corev1.PodRunning, rl("cpu", "3"))},
			want:         2,
			wantLimiting: CPU,
		},
		{
			name:  "no nodes",
			tmpl:  oneCPU,
			nodes: nil,
			want:  0,
		},
		{
			name: "limits without requests count as requests",
			tmpl: template(container(nil, rl("cpu", "2"))),
			nodes: []*corev1.Node{
				node("a", "5", "64Gi", 110),
			},
			want:         2,
			wantLimiting: CPU,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Compute(Input{Template: tc.tmpl, Nodes: tc.nodes, Pods: tc.pods, DefaultUnderlayIPCapacity: tc.defaultIPs})
			if got.Replicas != tc.want {
				t.Errorf("Replicas = %d, want %d (%+v)", got.Replicas, tc.want, got.Nodes)
			}
			if got.LimitingResource != tc.wantLimiting {
				t.Errorf("LimitingResource = %q, want %q", got.LimitingResource, tc.wantLimiting)
			}
			var sum int64
			for _, n := range got.Nodes {
				sum += n.Fits
				want, ex := tc.wantExcluded[n.Name]
				switch {
				case ex && !strings.Contains(n.Excluded, want):
					t.Errorf("node %s: Excluded = %q, want it to contain %q", n.Name, n.Excluded, want)
				case !ex && n.Excluded != "":
					t.Errorf("node %s: unexpectedly excluded: %q", n.Name, n.Excluded)
				case n.Excluded != "" && n.Fits != 0:
					t.Errorf("node %s: excluded but Fits = %d", n.Name, n.Fits)
				}
			}
			if sum != got.Replicas {
				t.Errorf("per-node fits sum to %d, total says %d", sum, got.Replicas)
			}
			if got.Reason == "" {
				t.Error("Reason is empty")
			}
		})
	}
}

func TestComputeReportsUsage(t *testing.T) {
	got := Compute(Input{
		Template: template(container(rl("cpu", "1"), nil)),
		Nodes:    []*corev1.Node{node("a", "2", "1Gi", 10)},
		Usage:    map[string]Usage{"a": {CPUMillis: 250, MemoryBytes: 1 << 20}},
	})
	if !got.UsageAvailable || got.Nodes[0].Usage == nil || got.Nodes[0].Usage.CPUMillis != 250 {
		t.Fatalf("usage not reported: %+v", got)
	}
	got = Compute(Input{Template: template(), Nodes: []*corev1.Node{node("a", "2", "1Gi", 10)}})
	if got.UsageAvailable || got.Nodes[0].Usage != nil {
		t.Fatalf("usage reported without input: %+v", got)
	}
}

func TestPodNeeds(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{container(rl("cpu", "3"), nil)},
		Containers: []corev1.Container{
			container(rl("cpu", "500m", "memory", "1Gi"), rl(names.UnderlayIPResource, "1")),
			container(rl("cpu", "500m"), nil),
		},
		Overhead: rl("cpu", "100m"),
	}}
	got := PodNeeds(p)
	want := Amounts{CPU: 3100, Memory: 1 << 30, Pods: 1, UnderlayIP: 1}
	for r, v := range want {
		if got[r] != v {
			t.Errorf("%s = %d, want %d", r, got[r], v)
		}
	}
	if _, ok := p.Spec.Containers[0].Resources.Requests[corev1.ResourceName(names.UnderlayIPResource)]; ok {
		t.Error("PodNeeds modified its argument")
	}
}

func BenchmarkCompute(b *testing.B) {
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for i := range 500 {
		n := node("n"+string(rune('a'+i%26))+string(rune('a'+i/26)), "16", "64Gi", 110)
		nodes = append(nodes, n)
		for range 20 {
			pods = append(pods, pod(n.Name, corev1.PodRunning, rl("cpu", "250m", "memory", "512Mi")))
		}
	}
	in := Input{Template: template(container(rl("cpu", "1", "memory", "1Gi"), nil)), Nodes: nodes, Pods: pods}
	b.ReportAllocs()
	for b.Loop() {
		Compute(in)
	}
}

// TestComputeMayGrowTo: a pool's max capacity is a separate figure; what
// fits is counted on the pool as it is.
func TestComputeMayGrowTo(t *testing.T) {
	mirrored := func(capacity, max string) nodeOpt {
		return func(n *corev1.Node) {
			n.Annotations = map[string]string{names.UnderlayIPSourceCapacityAnnotation: capacity, names.UnderlayIPSourceMaxCapacityAnnotation: max}
		}
	}
	ips := template(container(nil, rl(names.UnderlayIPResource, "1")))
	in := Input{Template: ips, Nodes: []*corev1.Node{
		node("a", "64", "64Gi", 110, ipCapacity("4")),
		node("b", "64", "64Gi", 110, mirrored("10", "29")),
		node("c", "64", "64Gi", 110, mirrored("8", "invalid: maxCapacity expression: x")),
	}, Pods: []*corev1.Pod{pod("b", corev1.PodRunning, rl(names.UnderlayIPResource, "3"))}}
	got := Compute(in)
	if got.Replicas != 4+7+8 {
		t.Fatalf("replicas %d, want 19 (the pools as they are)", got.Replicas)
	}
	if got.ReplicasIfPoolsGrow == nil || *got.ReplicasIfPoolsGrow != 4+26+8 {
		t.Fatalf("replicas if pools grow %v, want 38", got.ReplicasIfPoolsGrow)
	}
	if b := got.Nodes[1]; b.UnderlayIPMayGrowTo == nil || *b.UnderlayIPMayGrowTo != 29 || b.Fits != 7 {
		t.Fatalf("node b: %+v", b)
	}
	// CPU still bounds a grown pool; no source says: no figure.
	in.Template = template(container(nil, rl(names.UnderlayIPResource, "1", "cpu", "8")))
	if got := Compute(in); got.ReplicasIfPoolsGrow == nil || *got.ReplicasIfPoolsGrow != 4+8+8 {
		t.Fatalf("cpu-bound: %v, want 20", got.ReplicasIfPoolsGrow)
	}
	if got := Compute(Input{Template: ips, Nodes: []*corev1.Node{node("a", "1", "1Gi", 10, ipCapacity("4"))}}); got.ReplicasIfPoolsGrow != nil {
		t.Fatalf("no source says: %v, want none", *got.ReplicasIfPoolsGrow)
	}
}
