package wire

import (
	"bytes"
	"encoding/json"
	"testing"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/internal/underlay"
)

// fuzzLedger is a small cluster the decoded arguments are run against, so
// that the fuzzers cover the logic behind each decoder too.
func fuzzLedger() *extender.Ledger {
	return newTestLedger([]*v1.Node{node("a", ""), node("b", "1"), node("c", "x")},
		[]*v1.Pod{pod("a1", "a", 3), pod("b1", "b", 1)})
}

func seed(f *testing.F, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

func FuzzDecodeExtenderArgs(f *testing.F) {
	seed(f, namesArgs(pod("p", "", 1), "a", "b", "c", "ghost"))
	seed(f, nodesArgs(pod("p", "", 2), node("a", ""), node("late", "4"), node("bad", "-1")))
	seed(f, namesArgs(pod("plain", "", 0)))
	f.Add([]byte(`{"Pod":null,"NodeNames":["a"]}`))
	f.Add([]byte(`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"}},{}]}}`))
	f.Add([]byte(`{"Pod":{"spec":{"containers":[{"resources":{"limits":{"capscale.io/underlay-ip":"1e3"}}}]}},"NodeNames":["a","a"]}`))
	f.Add([]byte(`{"Pod":{"spec":{"overhead":{"capscale.io/underlay-ip":"-5"}}},"NodeNames":[]}`))
	f.Add([]byte(`{"Pod":{},"NodeNames":null,"Nodes":null}`))
	f.Add([]byte(`{`))
	// Found by this target: a Node whose status.nodeInfo is a string. Only
	// name and annotations are decoded and survivors are echoed as sent, so
	// the reply carries the same ill-typed Node.
	f.Add([]byte(`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"stAtus":{"nodeInfo":""}}]}}`))
	l := fuzzLedger()
	f.Fuzz(func(t *testing.T, data []byte) {
		args, err := DecodeExtenderArgs(data)
		if err != nil {
			return
		}
		if args.Pod == nil || (args.NodeNames == nil && args.Nodes == nil) {
			t.Fatalf("invalid args accepted: %s", data)
		}
		n := len(candidateNames(args))
		res := oracleFilter(l, args)
		kept := len(resultNames(res))
		if underlay.PodNeed(args.Pod) > 0 && args.NodeNames != nil && kept > n {
			t.Fatalf("filter kept %d of %d nodes", kept, n)
		}
		prio := oraclePrioritize(l, args)
		if len(prio) != n {
			t.Fatalf("prioritize scored %d of %d nodes", len(prio), n)
		}
		for _, hp := range prio {
			if hp.Score < extenderv1.MinExtenderPriority || hp.Score > extenderv1.MaxExtenderPriority {
				t.Fatalf("score %d out of range", hp.Score)
			}
		}
		var buf bytes.Buffer
		if _, err := res.WriteTo(&buf); err != nil {
			t.Fatalf("filter result does not encode: %v", err)
		}
		// The reply must decode for every body kube-scheduler can send, i.e.
		// every body that decodes into its own types. A body it could not
		// have sent (an ill-typed Node) is echoed as it came: checking the
		// type of every field of every Node would cost what decoding only
		// names and annotations saves.
		if json.Unmarshal(data, new(extenderv1.ExtenderArgs)) != nil {
			return
		}
		var wire extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(buf.Bytes(), &wire); err != nil {
			t.Fatalf("kube-scheduler could not decode the filter result: %v\n%s", err, buf.Bytes())
		}
	})
}

func FuzzDecodeBindingArgs(f *testing.F) {
	seed(f, bindArgs(pod("p", "", 1), "a"))
	f.Add([]byte(`{"PodName":"p","PodNamespace":"ns","Node":""}`))
	f.Add([]byte(`{"podname":"p","podnamespace":"ns","node":"a","poduid":"u"}`))
	f.Add([]byte(`{"PodName":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		args, err := DecodeBindingArgs(data)
		if err != nil {
			return
		}
		if args.PodName == "" || args.PodNamespace == "" || args.Node == "" {
			t.Fatalf("incomplete args accepted: %+v", args)
		}
	})
}

func FuzzDecodePreemptionArgs(f *testing.F) {
	seed(f, &extenderv1.ExtenderPreemptionArgs{Pod: pod("p", "", 1), NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{
		"a": {Pods: []*extenderv1.MetaPod{{UID: "uid-a1"}}}, "b": nil}})
	seed(f, &extenderv1.ExtenderPreemptionArgs{Pod: pod("p", "", 2), NodeNameToVictims: map[string]*extenderv1.Victims{
		"a": {Pods: []*v1.Pod{pod("a1", "a", 3)}, NumPDBViolations: 2}, "c": nil}})
	f.Add([]byte(`{"Pod":{},"NodeNameToMetaVictims":{"a":{"Pods":[null]}}}`))
	f.Add([]byte(`{"Pod":{},"NodeNameToVictims":{"a":{"Pods":[null,{}]}}}`))
	f.Add([]byte(`{"NodeNameToMetaVictims":{}}`))
	l := fuzzLedger()
	f.Fuzz(func(t *testing.T, data []byte) {
		args, err := DecodePreemptionArgs(data)
		if err != nil {
			return
		}
		res := verbsOf(l).preempt(args)
		for name, mv := range res.NodeNameToMetaVictims {
			_, inMeta := args.NodeNameToMetaVictims[name]
			_, inFull := args.NodeNameToVictims[name]
			if !inMeta && !inFull {
				t.Fatalf("preempt invented node %q", name)
			}
			if mv == nil {
				t.Fatalf("nil victims for %q", name)
			}
			for _, p := range mv.Pods {
				if p == nil {
					t.Fatalf("nil victim for %q", name)
				}
			}
		}
	})
}
