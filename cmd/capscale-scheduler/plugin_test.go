package main

// The UnderlayIP plugin against kube-scheduler's own types: NodeInfo with
// pods, CycleState, and the framework runtime for what only it does
// (nominated pods, preemption's what-if, signatures). The plain decisions
// are tested in the main module (schedplugin/*_test.go).

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
	"github.com/capscale/capscale/schedplugin"
)

func TestMain(m *testing.M) {
	// The framework runtime records into kube-scheduler's metrics, which
	// the binary registers at start.
	metrics.Register()
	os.Exit(m.Run())
}

func quantity(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }

// ipPod is a pod needing need IPs (none when 0), bound to node when set.
func ipPod(name, node string, need int64, priority int32) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{NodeName: node, Priority: &priority, Containers: []v1.Container{{Name: "app"}}},
	}
	if need > 0 {
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{
			Requests: v1.ResourceList{underlay.Resource: quantity(need)}, Limits: v1.ResourceList{underlay.Resource: quantity(need)}}
	}
	return p
}

// nodeInfo is kube-scheduler's NodeInfo for a node of the given capacity
// annotation ("" for none) holding pods.
func nodeInfo(name, capacity string, pods ...*v1.Pod) *framework.NodeInfo {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if capacity != "" {
		node.Annotations = map[string]string{names.UnderlayIPCapacityAnnotation: capacity}
	}
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(node)
	return ni
}

func newPlugin(t *testing.T) *schedplugin.Plugin {
	t.Helper()
	pl, err := schedplugin.New(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pl.(*schedplugin.Plugin)
}

func TestPreFilterAndFilter(t *testing.T) {
	tests := []struct {
		name          string
		pod           *v1.Pod
		node          *framework.NodeInfo
		wantPreFilter fwk.Code
		want          fwk.Code
		wantReason    string
	}{
		{name: "needs none: skipped", pod: ipPod("p", "", 0, 0), node: nodeInfo("n", "0"), wantPreFilter: fwk.Skip},
		{name: "empty node", pod: ipPod("p", "", 1, 0), node: nodeInfo("n", "3"), want: fwk.Success},
		{name: "default capacity", pod: ipPod("p", "", 1, 0), node: nodeInfo("n", ""), want: fwk.Success},
		{name: "last IP", pod: ipPod("p", "", 1, 0),
			node: nodeInfo("n", "3", ipPod("a", "n", 1, 0), ipPod("b", "n", 1, 0), ipPod("plain", "n", 0, 0)), want: fwk.Success},
		{name: "full", pod: ipPod("p", "", 1, 0),
			node: nodeInfo("n", "3", ipPod("a", "n", 2, 0), ipPod("b", "n", 1, 0)), want: fwk.Unschedulable,
			wantReason: "underlay IPs exhausted: 3/3 used, pod needs 1"},
		{name: "two needed, one free", pod: ipPod("p", "", 2, 0),
			node: nodeInfo("n", "3", ipPod("a", "n", 2, 0)), want: fwk.Unschedulable, wantReason: "2/3 used, pod needs 2"},
		{name: "capacity 0", pod: ipPod("p", "", 1, 0), node: nodeInfo("n", "0"), want: fwk.UnschedulableAndUnresolvable,
			wantReason: "underlay IP capacity too small: node has 0, pod needs 1"},
		{name: "invalid capacity", pod: ipPod("p", "", 1, 0), node: nodeInfo("n", "ten"), want: fwk.UnschedulableAndUnresolvable,
			wantReason: "invalid capscale.io/underlay-ip-capacity annotation"},
	}
	pl := newPlugin(t)
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			state := framework.NewCycleState()
			_, st := pl.PreFilter(ctx, state, tc.pod, []fwk.NodeInfo{tc.node})
			if st.Code() != tc.wantPreFilter {
				t.Fatalf("PreFilter = %v, want %v", st, tc.wantPreFilter)
			}
			if st.IsSkip() {
				if _, err := state.Read("PreFilter" + schedplugin.Name); err == nil {
					t.Error("a skipped pod left state behind")
				}
				return
			}
			st = pl.Filter(ctx, state, tc.pod, tc.node)
			if st.Code() != tc.want || !strings.Contains(st.Message(), tc.wantReason) {
				t.Fatalf("Filter = %v %q, want %v %q", st.Code(), st.Message(), tc.want, tc.wantReason)
			}
		})
	}
}

// TestNodeInfoCountsAsPodNeed: the IPs in use that Filter reads from
// NodeInfo are kube-scheduler's sum of its pods' effective requests, which
// must equal the sum of underlay.PodNeed (the one rule) for every shape of
// pod: sidecars, init containers, overhead, a limit alone.
func TestNodeInfoCountsAsPodNeed(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	req := func(n int64) v1.ResourceRequirements {
		return v1.ResourceRequirements{Requests: v1.ResourceList{underlay.Resource: quantity(n)}, Limits: v1.ResourceList{underlay.Resource: quantity(n)}}
	}
	sidecar := ipPod("sidecar", "n", 1, 0)
	sidecar.Spec.InitContainers = []v1.Container{{Name: "s", RestartPolicy: &always, Resources: req(1)}, {Name: "i", Resources: req(2)}}
	init := ipPod("init", "n", 1, 0)
	init.Spec.InitContainers = []v1.Container{{Name: "i", Resources: req(4)}}
	overhead := ipPod("overhead", "n", 1, 0)
	overhead.Spec.Overhead = v1.ResourceList{underlay.Resource: quantity(1)}
	pods := []*v1.Pod{sidecar, init, overhead, ipPod("plain", "n", 0, 0), ipPod("two", "n", 2, 0)}
	var want int64
	for _, p := range pods {
		want += underlay.PodNeed(p)
	}
	ni := nodeInfo("n", "100", pods...)
	if got := ni.GetRequested().GetScalarResources()[underlay.Resource]; got != want {
		t.Fatalf("NodeInfo counts %d IPs, the sum of PodNeed is %d", got, want)
	}
	// And Filter says so in its reason.
	pl := newPlugin(t)
	st := pl.Filter(context.Background(), framework.NewCycleState(), ipPod("p", "", 99, 0), ni)
	if w := fmt.Sprintf("%d/100 used", want); !strings.Contains(st.Message(), w) {
		t.Fatalf("Filter = %q, want %s", st.Message(), w)
	}
}

// TestAssumeAndForget: a pod kube-scheduler assumes (its bind in flight)
// or forgets (the bind failed) is added to or removed from the node's
// NodeInfo, and Filter follows with no cache of the plugin's own.
func TestAssumeAndForget(t *testing.T) {
	pl := newPlugin(t)
	ctx := context.Background()
	ni := nodeInfo("n", "2", ipPod("a", "n", 1, 0))
	pod := ipPod("p", "", 1, 0)
	state := framework.NewCycleState()
	pl.PreFilter(ctx, state, pod, nil)
	if st := pl.Filter(ctx, state, pod, ni); !st.IsSuccess() {
		t.Fatalf("before: %v", st)
	}
	assumed := ipPod("assumed", "n", 1, 0)
	ni.AddPod(assumed)
	if st := pl.Filter(ctx, state, pod, ni); st.Code() != fwk.Unschedulable {
		t.Fatalf("with the assumed pod: %v, want Unschedulable", st)
	}
	if err := ni.RemovePod(klog.Background(), assumed); err != nil {
		t.Fatal(err)
	}
	if st := pl.Filter(ctx, state, pod, ni); !st.IsSuccess() {
		t.Fatalf("forgotten: %v", st)
	}
}

func TestScoreMostFreeByCount(t *testing.T) {
	pl := newPlugin(t)
	ctx := context.Background()
	pod := ipPod("p", "", 1, 0)
	state := framework.NewCycleState()
	pl.PreFilter(ctx, state, pod, nil)
	// 5 free of 10 against 2 free of 3 (and a third node with 4 of 4):
	// by count the first wins, by fraction it would lose.
	nodes := []*framework.NodeInfo{
		nodeInfo("ten", "10", ipPod("a", "ten", 5, 0)),
		nodeInfo("three", "3", ipPod("b", "three", 1, 0)),
		nodeInfo("four", "4"),
	}
	infos := []fwk.NodeInfo{nodes[0], nodes[1], nodes[2]}
	if st := pl.PreScore(ctx, state, pod, infos); !st.IsSuccess() {
		t.Fatalf("PreScore = %v", st)
	}
	scores := make(fwk.NodeScoreList, len(nodes))
	for i, ni := range nodes {
		s, st := pl.Score(ctx, state, pod, ni)
		if !st.IsSuccess() {
			t.Fatal(st)
		}
		scores[i] = fwk.NodeScore{Name: ni.Node().Name, Score: s}
	}
	if scores[0].Score != 5 || scores[1].Score != 2 || scores[2].Score != 4 {
		t.Fatalf("raw scores %v, want the free counts 5, 2, 4", scores)
	}
	if st := pl.ScoreExtensions().NormalizeScore(ctx, state, pod, scores); !st.IsSuccess() {
		t.Fatal(st)
	}
	if scores[0].Score != fwk.MaxScore || scores[1].Score != 0 || scores[2].Score != 0 {
		t.Fatalf("normalized %v, want ten at %d and the others 0", scores, fwk.MaxScore)
	}
	// A pod that needs none skips Score.
	plain := ipPod("plain", "", 0, 0)
	if st := pl.PreScore(ctx, framework.NewCycleState(), plain, infos); !st.IsSkip() {
		t.Fatalf("PreScore of a pod needing none = %v, want Skip", st)
	}
}

// fakeNominator holds the pods nominated to each node.
type fakeNominator struct {
	fwk.PodNominator
	byNode map[string][]fwk.PodInfo
}

func (f fakeNominator) NominatedPodsForNode(node string) []fwk.PodInfo { return f.byNode[node] }

func newFramework(t *testing.T, opts ...frameworkruntime.Option) framework.Framework {
	t.Helper()
	opts = append(opts, frameworkruntime.WithSnapshotSharedLister(internalcache.NewEmptySnapshot()))
	fh, err := tf.NewFramework(context.Background(), []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		tf.RegisterPluginAsExtensionsWithWeight(schedplugin.Name, 100, schedplugin.New, "PreFilter", "Filter", "PreScore", "Score"),
	}, "capscale-scheduler", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return fh
}

// TestNominatedPods: a pod of higher or equal priority nominated to a node
// (preemption made room for it) holds its IPs there for the filter; one of
// lower priority does not. The framework adds it to a copy of the NodeInfo.
func TestNominatedPods(t *testing.T) {
	ctx := context.Background()
	ni := nodeInfo("n", "2", ipPod("a", "n", 1, 0))
	for _, tc := range []struct {
		name      string
		nominated int32
		want      fwk.Code
	}{
		{name: "higher priority nominated pod holds the last IP", nominated: 10, want: fwk.Unschedulable},
		{name: "lower priority nominated pod does not", nominated: -10, want: fwk.Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pi, err := framework.NewPodInfo(ipPod("nominee", "", 1, tc.nominated))
			if err != nil {
				t.Fatal(err)
			}
			fh := newFramework(t, frameworkruntime.WithPodNominator(fakeNominator{byNode: map[string][]fwk.PodInfo{"n": {pi}}}))
			pod := ipPod("p", "", 1, 0)
			state := framework.NewCycleState()
			if _, st, _ := fh.RunPreFilterPlugins(ctx, state, pod); !st.IsSuccess() {
				t.Fatal(st)
			}
			if st := fh.RunFilterPluginsWithNominatedPods(ctx, state, pod, ni); st.Code() != tc.want {
				t.Fatalf("filter = %v %q, want %v", st.Code(), st.Message(), tc.want)
			}
			if got := len(ni.GetPods()); got != 1 {
				t.Fatalf("the shared NodeInfo was changed: %d pods", got)
			}
		})
	}
}

// TestPreemptionWhatIf does what DefaultPreemption's dry run does on a
// candidate node: remove the lower-priority victims from a copy of the
// NodeInfo, tell the PreFilter extensions, and run the filters again. The
// plugin's Filter sees the freed IP: preemption is IP-aware in plugin mode.
func TestPreemptionWhatIf(t *testing.T) {
	ctx := context.Background()
	fh := newFramework(t, frameworkruntime.WithPodNominator(fakeNominator{}))
	victim := ipPod("victim", "n", 1, -10)
	ni := nodeInfo("n", "2", ipPod("a", "n", 1, 100), victim)
	preemptor := ipPod("preemptor", "", 1, 10)
	state := framework.NewCycleState()
	if _, st, _ := fh.RunPreFilterPlugins(ctx, state, preemptor); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := fh.RunFilterPlugins(ctx, state, preemptor, ni); st.Code() != fwk.Unschedulable {
		t.Fatalf("full node: %v, want Unschedulable (so that preemption is tried)", st)
	}
	whatIf := ni.Snapshot()
	if err := whatIf.RemovePod(klog.Background(), victim); err != nil {
		t.Fatal(err)
	}
	pi, _ := framework.NewPodInfo(victim)
	if st := fh.RunPreFilterExtensionRemovePod(ctx, state, preemptor, pi, whatIf); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := fh.RunFilterPluginsWithNominatedPods(ctx, state, preemptor, whatIf); !st.IsSuccess() {
		t.Fatalf("without the victim: %v, want Success", st)
	}
	// A node whose whole capacity is too small is not a candidate at all.
	small := nodeInfo("small", "0")
	if st := fh.RunFilterPlugins(ctx, state, preemptor, small); st.Code() != fwk.UnschedulableAndUnresolvable {
		t.Fatalf("capacity 0: %v, want UnschedulableAndUnresolvable", st)
	}
}

// TestSignaturesKeepBatching: with the plugin in a profile, kube-scheduler
// still signs pods that need no underlay IP (a Filter or Score plugin that
// is not a SignPlugin turns opportunistic batching off for the whole
// profile), and signs none that needs one: a batch hint would rank the
// nodes by the other plugins' scores (schedplugin's SignPod).
func TestSignaturesKeepBatching(t *testing.T) {
	fh := newFramework(t)
	ctx := context.Background()
	plain, other := fh.SignPod(ctx, ipPod("a", "", 0, 0)), fh.SignPod(ctx, ipPod("b", "", 0, 0))
	if plain == nil {
		t.Fatal("no signature for a pod without underlay IPs: the profile lost opportunistic batching")
	}
	if string(plain) != string(other) {
		t.Errorf("two plain pods, different signatures: %s, %s", plain, other)
	}
	for _, need := range []int64{1, 2} {
		if sig := fh.SignPod(ctx, ipPod("c", "", need, 0)); sig != nil {
			t.Errorf("a pod needing %d IPs is signed (%s): batching could hand it a node with fewer free IPs than another", need, sig)
		}
	}
}

// TestCapacityFollowsTheNode: the plugin remembers a node's capacity for
// the Node object it read it from: an update of the Node (a new object, as
// the informer delivers it) is read again at once, and a NodeInfo clone
// (preemption, nominated pods) gets the same answer.
func TestCapacityFollowsTheNode(t *testing.T) {
	pl := newPlugin(t)
	ctx := context.Background()
	ni := nodeInfo("n", "3", ipPod("a", "n", 1, 0), ipPod("b", "n", 1, 0))
	filter := func(ni fwk.NodeInfo) *fwk.Status {
		t.Helper()
		pod := ipPod("p", "", 1, 0)
		state := framework.NewCycleState()
		if _, st := pl.PreFilter(ctx, state, pod, []fwk.NodeInfo{ni}); !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		return pl.Filter(ctx, state, pod, ni)
	}
	// The first Filter reads the Node, the next PreFilter keeps the
	// reading, the Filter after it uses it.
	for i := 0; i < 3; i++ {
		if st := filter(ni); !st.IsSuccess() {
			t.Fatalf("capacity 3, 2 used, round %d: %v", i, st)
		}
	}
	// Evidence that the reading is kept: a Node changed in place (which an
	// informer never does) is not read again.
	ni.Node().Annotations[names.UnderlayIPCapacityAnnotation] = "2"
	if st := filter(ni); !st.IsSuccess() {
		t.Fatalf("the reading was not kept: %v", st)
	}
	// An update is a new object: read at once.
	updated := ni.Node().DeepCopy()
	updated.Annotations[names.UnderlayIPCapacityAnnotation] = "2"
	ni.SetNode(updated)
	if st := filter(ni); st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "2/2 used") {
		t.Fatalf("after the Node's update to capacity 2: %v, want Unschedulable 2/2 used", st)
	}
	score, st := pl.Score(ctx, framework.NewCycleState(), ipPod("p", "", 1, 0), ni)
	if !st.IsSuccess() || score != 0 {
		t.Fatalf("Score after the update = %d %v, want 0 free", score, st)
	}
	// A clone answers the same.
	clone := ni.Snapshot()
	if st := pl.Filter(ctx, framework.NewCycleState(), ipPod("p", "", 1, 0), clone); st.Code() != fwk.Unschedulable {
		t.Fatalf("clone: %v, want Unschedulable", st)
	}
	grown := updated.DeepCopy()
	grown.Annotations[names.UnderlayIPCapacityAnnotation] = "5"
	clone.SetNode(grown)
	if score, _ := pl.Score(ctx, framework.NewCycleState(), ipPod("p", "", 1, 0), clone); score != 3 {
		t.Fatalf("clone with capacity 5, 2 used: score %d, want 3", score)
	}
}

// drawsAllNode is a node whose pool, as its capacity source says, draws
// all: capacity mirrored as c.
func drawsAllNode(name string, c string, pods ...*v1.Pod) *framework.NodeInfo {
	ni := nodeInfo(name, "", pods...)
	n := ni.Node().DeepCopy()
	n.Annotations = map[string]string{names.UnderlayIPSourceCapacityAnnotation: c, names.UnderlayIPDrawsAnnotation: underlay.DrawsAll}
	ni.SetNode(n)
	return ni
}

// TestDrawsAll (issue 49 §2): on a node whose pool draws all, every pod
// on the pod network takes an IP, asked for or not: those already there
// count, and one being scheduled is charged one. hostNetwork pods and
// nodes that draw only marked pods are as before.
func TestDrawsAll(t *testing.T) {
	host := ipPod("host", "", 0, 0)
	host.Spec.HostNetwork = true
	onNode := func(p *v1.Pod, node string) *v1.Pod { p = p.DeepCopy(); p.Spec.NodeName = node; return p }
	tests := []struct {
		name          string
		pod           *v1.Pod
		node          *framework.NodeInfo
		wantPreFilter fwk.Code
		want          fwk.Code
		wantReason    string
	}{
		{name: "unmarked pods fill the pool", pod: ipPod("p", "", 1, 0),
			node: drawsAllNode("n", "3", ipPod("a", "n", 1, 0), ipPod("u1", "n", 0, 0), ipPod("u2", "n", 0, 0)),
			want: fwk.Unschedulable, wantReason: "underlay IPs exhausted: 3/3 used, pod needs 1"},
		{name: "hostNetwork pods draw nothing", pod: ipPod("p", "", 1, 0),
			node: drawsAllNode("n", "3", ipPod("a", "n", 1, 0), ipPod("u1", "n", 0, 0), onNode(host, "n")), want: fwk.Success},
		{name: "an unmarked pod is charged one", pod: ipPod("p", "", 0, 0),
			node: drawsAllNode("n", "2", ipPod("a", "n", 1, 0), ipPod("u1", "n", 0, 0)),
			want: fwk.Unschedulable, wantReason: "2/2 used, pod needs 1"},
		{name: "an unmarked pod fits the last IP", pod: ipPod("p", "", 0, 0),
			node: drawsAllNode("n", "3", ipPod("a", "n", 1, 0), ipPod("u1", "n", 0, 0)), want: fwk.Success},
		{name: "a hostNetwork pod is skipped", pod: host, node: drawsAllNode("n", "0"), wantPreFilter: fwk.Skip},
		{name: "marked pool: unmarked pods are skipped", pod: ipPod("p", "", 0, 0), node: nodeInfo("n", "0"), wantPreFilter: fwk.Skip},
		{name: "marked pool: unmarked pods take nothing", pod: ipPod("p", "", 1, 0),
			node: nodeInfo("n", "2", ipPod("a", "n", 1, 0), ipPod("u1", "n", 0, 0), ipPod("u2", "n", 0, 0)), want: fwk.Success},
	}
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl := newPlugin(t)
			state := framework.NewCycleState()
			_, st := pl.PreFilter(ctx, state, tc.pod, []fwk.NodeInfo{tc.node})
			if st.Code() != tc.wantPreFilter {
				t.Fatalf("PreFilter = %v, want %v", st, tc.wantPreFilter)
			}
			if st.IsSkip() {
				return
			}
			st = pl.Filter(ctx, state, tc.pod, tc.node)
			if st.Code() != tc.want || !strings.Contains(st.Message(), tc.wantReason) {
				t.Fatalf("Filter = %v %q, want %v %q", st.Code(), st.Message(), tc.want, tc.wantReason)
			}
		})
	}
}

// TestAwaitCapacitySource (issue 49 §4): with awaitCapacitySource, a node
// the mirror has not read takes nothing, whatever its label or the
// default; once read it takes what the rule says.
func TestAwaitCapacitySource(t *testing.T) {
	ctx := context.Background()
	pl, err := schedplugin.New(ctx, &runtime.Unknown{Raw: []byte(`{"awaitCapacitySource": true}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	unread := nodeInfo("n", "")
	unread.Node().Labels = map[string]string{names.UnderlayIPCapacityLabel: "5"}
	pod := ipPod("p", "", 1, 0)
	state := framework.NewCycleState()
	if _, st := pl.(*schedplugin.Plugin).PreFilter(ctx, state, pod, []fwk.NodeInfo{unread}); !st.IsSuccess() {
		t.Fatal(st)
	}
	st := pl.(*schedplugin.Plugin).Filter(ctx, state, pod, unread)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "capacity source not read yet") {
		t.Fatalf("unread node: Filter = %v %q", st.Code(), st.Message())
	}
	read := nodeInfo("n", "")
	read.Node().Labels = map[string]string{names.UnderlayIPCapacityLabel: "5"}
	read.Node().Annotations = map[string]string{names.UnderlayIPSourceAnnotation: names.UnderlayIPSourceNone}
	if st := pl.(*schedplugin.Plugin).Filter(ctx, state, pod, read); !st.IsSuccess() {
		t.Fatalf("read node: Filter = %v", st)
	}
}
