package wire

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

func namesArgs(p *v1.Pod, nodes ...string) *Args {
	return &Args{Pod: p, NodeNames: &nodes}
}

// nodesArgs goes through the wire format, as full Nodes always do.
func nodesArgs(p *v1.Pod, nodes ...*v1.Node) *Args {
	list := &v1.NodeList{}
	for _, n := range nodes {
		list.Items = append(list.Items, *n)
	}
	data, err := json.Marshal(&extenderv1.ExtenderArgs{Pod: p, Nodes: list})
	if err != nil {
		panic(err)
	}
	args, err := DecodeExtenderArgs(data)
	if err != nil {
		panic(err)
	}
	return args
}

func resultNames(r *FilterResult) []string {
	out := []string{}
	if r.NodeNames != nil {
		return append(out, *r.NodeNames...)
	}
	for _, n := range r.Nodes.Items {
		out = append(out, n.Name)
	}
	return out
}

func TestFilter(t *testing.T) {
	nodes := []*v1.Node{node("full", "2"), node("room", ""), node("zero", "0"), node("bad", "x"), node("small", "1"), node("room2", "")}
	pods := []*v1.Pod{pod("f1", "full", 1), pod("f2", "full", 1), pod("r1", "room", 1), pod("r2", "room2", 1)}
	l := newTestLedger(nodes, pods)
	all := []string{"full", "room", "zero", "bad", "small", "ghost", "room2"}

	tests := []struct {
		name             string
		pod              *v1.Pod
		wantKept         []string
		wantFailed       map[string]string
		wantUnresolvable []string
	}{
		{
			// small has room too, but fewer free IPs: only the most free
			// stay, in the order sent, and no reasons are needed.
			name:       "one IP: the most free only",
			pod:        pod("new", "", 1),
			wantKept:   []string{"room", "room2"},
			wantFailed: map[string]string{},
		},
		{
			name:       "two IPs",
			pod:        pod("new", "", 2),
			wantKept:   []string{"room", "room2"},
			wantFailed: map[string]string{},
		},
		{
			name:     "ten IPs: no room anywhere, every node explained",
			pod:      pod("new", "", 10),
			wantKept: []string{},
			wantFailed: map[string]string{
				"room":  "underlay IPs exhausted: 1/10 used, pod needs 10",
				"room2": "underlay IPs exhausted: 1/10 used, pod needs 10",
				"ghost": "node is unknown to the underlay IP extender",
			},
			wantUnresolvable: []string{"bad", "full", "small", "zero"},
		},
		{
			name:       "no IPs: every node passes",
			pod:        pod("plain", "", 0),
			wantKept:   all,
			wantFailed: map[string]string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := oracleFilter(l, namesArgs(tc.pod, all...))
			if res.Nodes != nil {
				t.Errorf("names mode answered with Nodes")
			}
			if got := resultNames(res); !reflect.DeepEqual(got, tc.wantKept) {
				t.Errorf("kept %v, want %v", got, tc.wantKept)
			}
			if !reflect.DeepEqual(map[string]string(res.FailedNodes), tc.wantFailed) {
				t.Errorf("FailedNodes = %v, want %v", res.FailedNodes, tc.wantFailed)
			}
			var unres []string
			for n := range res.FailedAndUnresolvableNodes {
				unres = append(unres, n)
			}
			sort.Strings(unres)
			if !reflect.DeepEqual(unres, tc.wantUnresolvable) {
				t.Errorf("unresolvable = %v, want %v", unres, tc.wantUnresolvable)
			}
		})
	}
}

func TestFilterFullNodes(t *testing.T) {
	l := newTestLedger([]*v1.Node{node("full", "1"), node("room", "")}, []*v1.Pod{pod("f", "full", 1)})
	// "late" is not in the node informer yet: its object's annotation rules.
	args := nodesArgs(pod("new", "", 1), node("full", "1"), node("room", ""), node("late", "12"), node("latezero", "0"))
	res := oracleFilter(l, args)
	if res.NodeNames != nil {
		t.Errorf("Nodes mode answered with NodeNames")
	}
	if got, want := resultNames(res), []string{"late"}; !reflect.DeepEqual(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	if res.Nodes.Items[0].Annotations == nil {
		t.Errorf("surviving Node objects must be returned whole")
	}
	res = oracleFilter(l, nodesArgs(pod("new", "", 1), node("full", "1"), node("latezero", "0")))
	if got := resultNames(res); len(got) != 0 {
		t.Errorf("kept %v, want none", got)
	}
	if _, ok := res.FailedNodes["full"]; !ok {
		t.Errorf("full not in FailedNodes: %v", res.FailedNodes)
	}
	if _, ok := res.FailedAndUnresolvableNodes["latezero"]; !ok {
		t.Errorf("latezero not unresolvable: %v", res.FailedAndUnresolvableNodes)
	}
	// The pod's need is remembered for a bind that outruns the informer.
	if n, ok := l.RememberedNeed(args.Pod.UID); !ok || n != 1 {
		t.Errorf("need not remembered: %d %v", n, ok)
	}
}

func TestPrioritize(t *testing.T) {
	l := newTestLedger([]*v1.Node{node("a", ""), node("b", ""), node("c", "3")},
		[]*v1.Pod{pod("a1", "a", 5), pod("c1", "c", 3)})
	tests := []struct {
		name string
		args *Args
		want extenderv1.HostPriorityList
	}{
		{
			name: "names",
			args: namesArgs(pod("new", "", 1), "a", "b", "c", "ghost"),
			want: extenderv1.HostPriorityList{{Host: "a", Score: 5}, {Host: "b", Score: 10}, {Host: "c", Score: 0}, {Host: "ghost", Score: 0}},
		},
		{
			name: "full nodes",
			args: nodesArgs(pod("new", "", 1), node("b", ""), node("a", "")),
			want: extenderv1.HostPriorityList{{Host: "b", Score: 10}, {Host: "a", Score: 5}},
		},
		{
			name: "pod without need",
			args: namesArgs(pod("plain", "", 0), "a", "b"),
			want: extenderv1.HostPriorityList{{Host: "a"}, {Host: "b"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := oraclePrioritize(l, tc.args); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Prioritize = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPreempt(t *testing.T) {
	// a: 3/3 used by two low-priority pods; b: 2/2 used; c: 1/3 used.
	l := newTestLedger([]*v1.Node{node("a", "3"), node("b", "2"), node("c", "3")},
		[]*v1.Pod{pod("a1", "a", 1), pod("a2", "a", 2), pod("b1", "b", 2), pod("c1", "c", 1)})
	meta := func(uids ...string) *extenderv1.MetaVictims {
		mv := &extenderv1.MetaVictims{Pods: []*extenderv1.MetaPod{}}
		for _, u := range uids {
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: u})
		}
		return mv
	}
	keys := func(r *extenderv1.ExtenderPreemptionResult) []string {
		var out []string
		for k := range r.NodeNameToMetaVictims {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	tests := []struct {
		name string
		args *extenderv1.ExtenderPreemptionArgs
		want []string
	}{
		{
			name: "meta victims: only nodes where eviction frees enough",
			args: &extenderv1.ExtenderPreemptionArgs{Pod: pod("hi", "", 2), NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{
				"a":     meta("uid-a1"), // frees 1, needs 2: no
				"b":     meta("uid-b1"), // frees 2: yes
				"c":     meta(),         // 2 free already: yes
				"ghost": meta("uid-x"),  // unknown node: no
				"a2":    nil,            // unknown node, nil victims: no
			}},
			want: []string{"b", "c"},
		},
		{
			name: "victims on another node free nothing",
			args: &extenderv1.ExtenderPreemptionArgs{Pod: pod("hi", "", 2), NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{
				"a": meta("uid-b1"),
			}},
			want: nil,
		},
		{
			name: "full victims",
			args: &extenderv1.ExtenderPreemptionArgs{Pod: pod("hi", "", 3), NodeNameToVictims: map[string]*extenderv1.Victims{
				"a": {Pods: []*v1.Pod{pod("a1", "a", 1), pod("a2", "a", 2), nil}},
				"b": {Pods: []*v1.Pod{pod("b1", "b", 2)}},
				"c": nil,
			}},
			want: []string{"a"},
		},
		{
			name: "pod without need keeps every candidate",
			args: &extenderv1.ExtenderPreemptionArgs{Pod: pod("plain", "", 0), NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{
				"a": meta("uid-a1"), "ghost": meta(),
			}},
			want: []string{"a", "ghost"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := verbsOf(l).preempt(tc.args)
			if got := keys(res); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("kept %v, want %v", got, tc.want)
			}
			for node, mv := range res.NodeNameToMetaVictims {
				if mv == nil || mv.Pods == nil {
					t.Errorf("node %s: nil victims returned", node)
					continue
				}
				for _, p := range mv.Pods {
					if p == nil {
						t.Errorf("node %s: nil victim returned", node)
					}
				}
			}
		})
	}
	// Victims are passed back unchanged.
	res := verbsOf(l).preempt(&extenderv1.ExtenderPreemptionArgs{Pod: pod("hi", "", 2), NodeNameToVictims: map[string]*extenderv1.Victims{
		"b": {Pods: []*v1.Pod{pod("b1", "b", 2)}, NumPDBViolations: 1},
	}})
	want := &extenderv1.MetaVictims{Pods: []*extenderv1.MetaPod{{UID: "uid-b1"}}, NumPDBViolations: 1}
	if !reflect.DeepEqual(res.NodeNameToMetaVictims["b"], want) {
		t.Errorf("victims of b = %+v, want %+v", res.NodeNameToMetaVictims["b"], want)
	}
}

// TestFilterAllFullStaysInNamesMode pins the reply of a names-only filter
// in which no node fits: an empty list, not null, even when the call's name
// buffer is new (a nil slice).
func TestFilterAllFullStaysInNamesMode(t *testing.T) {
	l := newTestLedger([]*v1.Node{node("a", "1")}, []*v1.Pod{pod("held", "a", 1)})
	res := verbsOf(l).filter(namesArgs(pod("p", "", 1), "a"), new(Scratch))
	var b strings.Builder
	if _, err := res.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"NodeNames":[]`) {
		t.Fatalf("reply %s, want \"NodeNames\":[]", b.String())
	}
}
