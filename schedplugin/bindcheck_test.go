package schedplugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

func (n usedInfo) Snapshot() fwk.NodeInfo { return n }

// mapState is a CycleState of what Read and Write touch.
type mapState struct {
	fwk.CycleState
	m map[fwk.StateKey]fwk.StateData
}

func newMapState() *mapState { return &mapState{m: map[fwk.StateKey]fwk.StateData{}} }

func (s *mapState) Read(k fwk.StateKey) (fwk.StateData, error) {
	if d, ok := s.m[k]; ok {
		return d, nil
	}
	return nil, fwk.ErrNotFound
}

func (s *mapState) Write(k fwk.StateKey, d fwk.StateData) { s.m[k] = d }

// apiNodes is the apiserver's view of Nodes' annotations for the check at
// bind; err, if set, is every read's answer.
type apiNodes struct {
	annotations map[string]map[string]string
	err         error
	reads       int
	// pods are the pods bound to each node, as the apiserver lists them.
	pods map[string][]v1.Pod
	// duringList, if set, runs while the pods are listed: a change made
	// meanwhile.
	duringList func()
	// bound are the binds made, "pod/node"; waits the paced waits.
	bound []string
	waits int
	// waitDeadline: the last wait had a deadline.
	waitDeadline bool
}

func (a *apiNodes) wait(ctx context.Context) error {
	a.waits++
	_, a.waitDeadline = ctx.Deadline()
	return nil
}

func (a *apiNodes) bind(_ context.Context, pod *v1.Pod, node string) error {
	a.bound = append(a.bound, pod.Name+"/"+node)
	return nil
}

// podsOn returns the node's pods that known does not report, as the
// metadata list and the reads of the missing pods would.
func (a *apiNodes) podsOn(_ context.Context, node string, known func(types.UID) bool) ([]v1.Pod, error) {
	if a.err != nil {
		return nil, a.err
	}
	if a.duringList != nil {
		a.duringList()
	}
	var out []v1.Pod
	for _, p := range a.pods[node] {
		if !known(p.UID) {
			out = append(out, p)
		}
	}
	return out, nil
}

func (a *apiNodes) get(_ context.Context, name string) (map[string]string, map[string]string, error) {
	a.reads++
	if a.err != nil {
		return nil, nil, a.err
	}
	an, ok := a.annotations[name]
	if !ok {
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
	}
	return an, nil, nil
}

// TestBindChecksTheCapacityNow: the scheduler chose n1 from a view where it
// had capacity 10 and 3 IPs in use; the plugin binds it only if the
// capacity the apiserver holds now still fits, after one paced wait.
func TestBindChecksTheCapacityNow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		now      map[string]string // n1's annotations now; nil: deleted
		err      error
		want     fwk.Code
		inReason string
	}{
		{name: "unchanged", now: annotated("10"), want: fwk.Success},
		{name: "raised", now: annotated("20"), want: fwk.Success},
		{name: "lowered, still room", now: annotated("4"), want: fwk.Success},
		{name: "lowered to what is in use", now: annotated("3"), want: fwk.Unschedulable, inReason: "node n1 changed since the scheduler read it: underlay IPs exhausted: 3/3 used, pod needs 1"},
		{name: "lowered to 0", now: annotated("0"), want: fwk.Unschedulable, inReason: "node has 0, pod needs 1"},
		{name: "made invalid", now: annotated("many"), want: fwk.Unschedulable, inReason: "invalid"},
		{name: "the IPAM reports more in use", now: map[string]string{names.UnderlayIPCapacityAnnotation: "10", names.UnderlayIPSourceUsedAnnotation: "10"}, want: fwk.Unschedulable, inReason: "10/10 used"},
		{name: "deleted", want: fwk.Unschedulable, inReason: "node n1 was deleted before the bind"},
		{name: "apiserver unreachable", now: annotated("10"), err: errors.New("connection refused"), want: fwk.Error, inReason: "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &apiNodes{annotations: map[string]map[string]string{}, err: tc.err}
			if tc.now != nil {
				api.annotations["n1"] = tc.now
			}
			pl := &Plugin{rule: underlay.Rule{Default: 10}, fresh: api,
				nodeInfos: usedNodes{"n1": {node: ipNode("n1", "10"), used: 3}}}
			state, pod := newMapState(), ipPod("p", "", 1)
			if st := pl.Reserve(context.Background(), state, pod, "n1"); !st.IsSuccess() {
				t.Fatalf("Reserve = %v", st)
			}
			st := pl.Bind(context.Background(), state, pod, "n1")
			if st.Code() != tc.want || !strings.Contains(st.Message(), tc.inReason) {
				t.Fatalf("Bind = %v %q; want %v with %q", st.Code(), st.Message(), tc.want, tc.inReason)
			}
			reads := 1
			if tc.err != nil {
				reads = 0 // the list before it failed
			}
			if api.reads != reads || api.waits != 1 {
				t.Fatalf("%d reads of the Node after %d waits, want %d and 1", api.reads, api.waits, reads)
			}
			if bound := tc.want == fwk.Success; (len(api.bound) == 1) != bound || bound && api.bound[0] != "p/n1" {
				t.Fatalf("binds made %v; want p/n1 only if it fits", api.bound)
			}
		})
	}
}

// TestBindLeavesOtherPodsAlone: a pod that takes no IP is bound without a
// read, and so is every pod of a plugin with no client (a framework built
// in a test).
func TestBindLeavesOtherPodsAlone(t *testing.T) {
	api := &apiNodes{annotations: map[string]map[string]string{"n1": annotated("0")}}
	pl := &Plugin{rule: underlay.Rule{Default: 10}, fresh: api, nodeInfos: usedNodes{"n1": {node: ipNode("n1", "10")}}}
	state, pod := newMapState(), ipPod("plain", "", 0)
	pl.Reserve(context.Background(), state, pod, "n1")
	if st := pl.Bind(context.Background(), state, pod, "n1"); st.Code() != fwk.Skip || api.reads != 0 || len(api.bound) != 0 {
		t.Fatalf("Bind of a pod that needs no IP = %v after %d reads, binds %v; want Skip, no read, no bind", st, api.reads, api.bound)
	}
	pl.fresh = nil
	state, pod = newMapState(), ipPod("p", "", 1)
	pl.Reserve(context.Background(), state, pod, "n1")
	if st := pl.Bind(context.Background(), state, pod, "n1"); st.Code() != fwk.Skip {
		t.Fatalf("Bind without a client = %v, want Skip", st)
	}
}

// TestBindChargesDrawnPods: on a node that draws all, a pod that asks for no
// IP takes one, and the pods already there that ask for none count.
func TestBindChargesDrawnPods(t *testing.T) {
	draws := func(capacity string) map[string]string {
		return map[string]string{names.UnderlayIPCapacityAnnotation: capacity, names.UnderlayIPDrawsAnnotation: "all"}
	}
	node := &v1.Node{}
	node.Name, node.Annotations = "n1", draws("3")
	api := &apiNodes{annotations: map[string]map[string]string{"n1": draws("2")}}
	pl := &Plugin{rule: underlay.Rule{Default: 10}, fresh: api,
		nodeInfos: usedNodes{"n1": {node: node, pods: []*v1.Pod{ipPod("a", "n1", 0), ipPod("b", "n1", 0)}}}}
	pl.drawsAll.Store(true)
	state, pod := newMapState(), ipPod("plain", "", 0)
	pl.Reserve(context.Background(), state, pod, "n1")
	if st := pl.Bind(context.Background(), state, pod, "n1"); st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "2/2 used") {
		t.Fatalf("Bind = %v; want Unschedulable, 2/2 used", st)
	}
}

// TestBindCountsPodsTheViewLacks: the scheduler's view of n1 holds pods a
// and b (2 of 3 IPs) while the apiserver lists a third pod bound there, by
// another binder or by a bind whose answer was lost: the bind is refused.
// A listed pod the view holds, one that has ended, and the pod being bound
// itself count no more than the view says.
func TestBindCountsPodsTheViewLacks(t *testing.T) {
	a, b := ipPod("a", "n1", 1), ipPod("b", "n1", 1)
	ended := ipPod("ended", "n1", 1)
	ended.Status.Phase = v1.PodSucceeded
	pod := ipPod("p", "", 1)
	self := *pod
	self.Spec.NodeName = "n1"
	for _, tc := range []struct {
		name   string
		listed []*v1.Pod
		want   fwk.Code
	}{
		{name: "the view's own pods", listed: []*v1.Pod{a, b}, want: fwk.Success},
		{name: "an ended pod and the pod itself", listed: []*v1.Pod{a, b, ended, &self}, want: fwk.Success},
		{name: "a pod the view lacks", listed: []*v1.Pod{a, b, ipPod("unseen", "n1", 1)}, want: fwk.Unschedulable},
		{name: "deleted from the API, still in the view", listed: nil, want: fwk.Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &apiNodes{annotations: map[string]map[string]string{"n1": annotated("3")}, pods: map[string][]v1.Pod{}}
			for _, p := range tc.listed {
				api.pods["n1"] = append(api.pods["n1"], *p)
			}
			pl := &Plugin{rule: underlay.Rule{Default: 10}, fresh: api,
				nodeInfos: usedNodes{"n1": {node: ipNode("n1", "3"), used: 2, pods: []*v1.Pod{a, b}}}}
			state := newMapState()
			pl.Reserve(context.Background(), state, pod, "n1")
			st := pl.Bind(context.Background(), state, pod, "n1")
			if st.Code() != tc.want {
				t.Fatalf("Bind = %v %q; want %v", st.Code(), st.Message(), tc.want)
			}
			if tc.want == fwk.Unschedulable && !strings.Contains(st.Message(), "3/3 used") {
				t.Fatalf("Bind's reason %q; want 3/3 used", st.Message())
			}
		})
	}
}

// TestBindReadsTheNodeAfterTheList: a capacity lowered while the node's
// pods were listed (seconds, on a loaded plane) is the one the bind rests
// on: the Node is read after the list, not before it.
func TestBindReadsTheNodeAfterTheList(t *testing.T) {
	api := &apiNodes{annotations: map[string]map[string]string{"n1": annotated("10")}}
	api.duringList = func() { api.annotations["n1"] = annotated("3") }
	pl := &Plugin{rule: underlay.Rule{Default: 10}, fresh: api,
		nodeInfos: usedNodes{"n1": {node: ipNode("n1", "10"), used: 3}}}
	state, pod := newMapState(), ipPod("p", "", 1)
	pl.Reserve(context.Background(), state, pod, "n1")
	if st := pl.Bind(context.Background(), state, pod, "n1"); st.Code() != fwk.Unschedulable || len(api.bound) != 0 {
		t.Fatalf("Bind = %v, binds %v; want Unschedulable, no bind", st, api.bound)
	}
}

// TestBindWaitsWithoutATimeout: a burst's binds may wait long on the pace,
// as they would on DefaultBinder's limiter; the 10 s timeout is the
// requests' own, or the last of a burst would fail and back off.
func TestBindWaitsWithoutATimeout(t *testing.T) {
	api := &apiNodes{annotations: map[string]map[string]string{"n1": annotated("10")}}
	pl := &Plugin{rule: underlay.Rule{Default: 10}, fresh: api, nodeInfos: usedNodes{"n1": {node: ipNode("n1", "10")}}}
	state, pod := newMapState(), ipPod("p", "", 1)
	pl.Reserve(context.Background(), state, pod, "n1")
	if st := pl.Bind(context.Background(), state, pod, "n1"); !st.IsSuccess() || api.waits != 1 || api.waitDeadline {
		t.Fatalf("Bind = %v after %d waits, the wait with a deadline: %v; want bound after one wait without", st, api.waits, api.waitDeadline)
	}
}

// TestUnseenChargesAsTheViewWould: on a node that draws all, a pod the view
// lacks takes its request and one IP more if it is on the pod network; with
// an IPAM report, one without an IP yet is unlisted too.
func TestUnseenChargesAsTheViewWould(t *testing.T) {
	plain := ipPod("plain", "n1", 0)
	marked := ipPod("marked", "n1", 2)
	marked.Status.PodIP = "10.0.0.5"
	c := underlay.Capacity{IPs: 10, DrawsAll: true, IPAM: underlay.IPAMReport{Reported: true, Used: 1}}
	got := unseen(underlay.Charges{Pods: 1}, inView(usedInfo{}, "binding"), []v1.Pod{*plain, *marked}, c)
	want := underlay.Charges{Pods: 1 + 1 + 2, Unlisted: 1}
	if got != want {
		t.Fatalf("unseen = %+v, want %+v", got, want)
	}
}
