package wire

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// checkSameAsStdlib fails unless the fast decoder and json.Unmarshal into
// Args agree on data: both reject it, or both give equal Args.
func checkSameAsStdlib(t *testing.T, data []byte) {
	t.Helper()
	fast, ferr := DecodeExtenderArgs(data)
	std, serr := decodeExtenderArgsStdlib(data)
	if (ferr == nil) != (serr == nil) {
		t.Fatalf("fast error %v, encoding/json error %v, for %q", ferr, serr, data)
	}
	if ferr != nil {
		return
	}
	if fast.plainNames && !allPlain(*fast.NodeNames) {
		t.Fatalf("names %q marked plain", *fast.NodeNames)
	}
	f := *fast
	f.plainNames = false
	if !reflect.DeepEqual(&f, std) {
		t.Fatalf("fast decoder gives\n%#v\nencoding/json gives\n%#v\nfor %q", fast, std, data)
	}
	if a, b := underlay.PodNeed(fast.Pod), underlay.PodNeed(std.Pod); a != b {
		t.Fatalf("PodNeed %d, encoding/json %d, for %q", a, b, data)
	}
	// The slim Pod says what the whole v1.Pod says, wherever that decodes.
	var whole struct{ Pod *v1.Pod }
	if json.Unmarshal(data, &whole) == nil && whole.Pod != nil {
		w, f := whole.Pod, fast.Pod
		if a, b := underlay.PodNeed(f), underlay.PodNeed(w); a != b {
			t.Fatalf("PodNeed %d from the slim Pod, %d from v1.Pod, for %q", a, b, data)
		}
		if f.Name != w.Name || f.Namespace != w.Namespace || f.UID != w.UID || !reflect.DeepEqual(f.Spec.Priority, w.Spec.Priority) {
			t.Fatalf("slim Pod %s/%s %s %v, v1.Pod %s/%s %s %v, for %q", f.Namespace, f.Name, f.UID, f.Spec.Priority,
				w.Namespace, w.Name, w.UID, w.Spec.Priority, data)
		}
	}
}

// decoderCases are bodies where a hand-written JSON decoder typically goes
// wrong; each must decode exactly as json.Unmarshal does.
var decoderCases = []string{
	// Plain shapes.
	`{"Pod":{},"NodeNames":["a","b"]}`,
	`{"Pod":{},"NodeNames":[]}`,
	`{"Pod":{},"Nodes":{"items":[]}}`,
	`{"Pod":{},"Nodes":{}}`,
	`{"Pod":{},"Nodes":{"items":null}}`,
	`{"Pod":{},"NodeNames":null,"Nodes":null}`,
	`{"Pod":null,"NodeNames":["a"]}`,
	`null`,
	` {"Pod" : { } , "NodeNames" : [ "a" , "b" ] } ` + "\n\t\r",
	// Key matching: case-insensitive, escapes, Unicode folding.
	`{"pod":{},"nodenames":["a"]}`,
	`{"POD":{},"NODES":{"ITEMS":[{"METADATA":{"NAME":"x","ANNOTATIONS":{"k":"v"}}}]}}`,
	`{"\u0050od":{},"Node\u004eames":["a"]}`,
	`{"Pod":{},"NodeNameſ":["a"]}`,
	`{"Pod":{},"Nodeſ":{"itemſ":[{"metadata":{"name":"ſ"}}]}}`,
	`{"Pod":{},"NodeNames ":["a"]}`,
	`{"Pod":{},"Node":["a"]}`,
	`{"Pod":{},"NodeNamesX":["a"],"Nodes":{}}`,
	// Strings: escapes, Unicode, invalid UTF-8, surrogates.
	`{"Pod":{},"NodeNames":["a\"b","\\","\/","\b\f\n\r\t","\u00e9","\ud83d\ude00","\ud800","é","日本"]}`,
	"{\"Pod\":{},\"NodeNames\":[\"\xff\xfe\",\"a\xc3\"]}",
	"{\"Pod\":{},\"Nodes\":{\"items\":[{\"metadata\":{\"name\":\"\xe2\x82\",\"annotations\":{\"\xff\":\"\xc0\"}}}]}}",
	`{"Pod":{},"NodeNames":["\u0000"]}`,
	// Duplicate keys: last wins, objects merge, slices are reused.
	`{"Pod":{},"NodeNames":["a","b","c"],"NodeNames":["x"],"NodeNames":["y",null,null]}`,
	`{"Pod":{},"NodeNames":["a","b"],"NodeNames":[null]}`,
	`{"Pod":{},"NodeNames":["a","b"],"NodeNames":[]}`,
	`{"Pod":{},"NodeNames":["a"],"NodeNames":null}`,
	`{"Pod":{},"NodeNames":[null,null]}`,
	`{"Pod":{"metadata":{"name":"p"}},"Pod":{"metadata":{"namespace":"n"}},"NodeNames":[]}`,
	`{"Pod":{"metadata":{"name":"p"}},"Pod":null,"Pod":{"metadata":{"namespace":"n"}},"NodeNames":[]}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"}}]},"Nodes":{}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"}}]},"Nodes":{"items":[]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"}},{}]},"Nodes":{"items":[{}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a","name":"b","name":null}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"metadata":{"annotations":{"k":"v"}},"metadata":null}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"annotations":{"a":"1"},"annotations":{"b":"2","a":"3"}}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"annotations":{"a":"1"},"annotations":null,"annotations":{"b":"2"}}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"annotations":{"a":null,"b":"x","b":null}}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"annotations":{}}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"l","labels":{"capscale.io/underlay-ip-capacity":"4"},"annotations":{"a":"1"}}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"labels":{"a":"1"},"labels":null,"labels":{"b":"2","b":null}}}]}}`,
	// Nulls where objects are expected, unknown fields of every type.
	`{"Pod":{},"Nodes":{"items":[null,{},{"metadata":null},{"metadata":{"name":null,"annotations":null}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"kind":"Node","spec":{"x":[1,-2.5e+3,true,false,null,{"a":[]}]},"metadata":{"labels":{"a":"b"},"name":"n"}}],"kind":"NodeList"},"Extra":[{},[]]}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"n","uid":"u","annotations":{"capscale.io/underlay-ip-capacity":"3"}},"status":{"images":[{"names":["a","b"],"sizeBytes":5}]}}]}}`,
	// Pod fields the need is computed from.
	`{"Pod":{"spec":{"containers":[{"resources":{"limits":{"capscale.io/underlay-ip":"2"}}}]}},"NodeNames":["a"]}`,
	`{"Pod":{"spec":{"initContainers":[{"restartPolicy":"Always","resources":{"requests":{"capscale.io/underlay-ip":"1"}}},{"resources":{"limits":{"capscale.io/underlay-ip":"3"}}}],"overhead":{"capscale.io/underlay-ip":"1"}}},"NodeNames":["a"]}`,
	`{"Pod":{"spec":{"containers":[{"resources":{"limits":{"capscale.io/underlay-ip":"x"}}}]}},"NodeNames":["a"]}`,
	`{"Pod":{"spec":{"containers":[{"resources":{"limits":{"capscale.io/underlay-ip":2}}}]}},"NodeNames":["a"]}`,
	`{"Pod":{"metadata":{"name":5}},"NodeNames":["a"]}`,
	`{"Pod":"x","NodeNames":["a"]}`,
	`{"Pod":[],"NodeNames":["a"]}`,
	// Type errors.
	`{"Pod":{},"NodeNames":"a"}`,
	`{"Pod":{},"NodeNames":{}}`,
	`{"Pod":{},"NodeNames":[1]}`,
	`{"Pod":{},"NodeNames":[["a"]]}`,
	`{"Pod":{},"NodeNames":[true]}`,
	`{"Pod":{},"Nodes":[]}`,
	`{"Pod":{},"Nodes":"x"}`,
	`{"Pod":{},"Nodes":{"items":{}}}`,
	`{"Pod":{},"Nodes":{"items":[1]}}`,
	`{"Pod":{},"Nodes":{"items":["x"]}}`,
	`{"Pod":{},"Nodes":{"items":[[]]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":[]}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":5}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":true}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"annotations":[]}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"annotations":{"a":1}}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"annotations":{"a":{}}}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"labels":[]}}]}}`,
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"labels":{"a":1}}}]}}`,
	`[]`, `"x"`, `1`, `true`,
	// Syntax errors.
	``, ` `, `{`, `{"Pod":{}`, `{"Pod":{},}`, `{"Pod":{},"NodeNames":["a",]}`, `{"Pod":{} "NodeNames":[]}`,
	`{"Pod":{},"NodeNames":["a"]}x`, `{"Pod":{},"NodeNames":["a"]}{}`, `{"Pod":{},"NodeNames":["a"]},`,
	`{Pod:{},"NodeNames":[]}`, `{'Pod':{},"NodeNames":[]}`, `{"Pod":{},"NodeNames":['a']}`,
	`{"Pod":{},"NodeNames":["a]}`, `{"Pod":{},"NodeNames":["a\x"]}`, `{"Pod":{},"NodeNames":["\u12"]}`, `{"Pod":{},"NodeNames":["\u12G4"]}`,
	"{\"Pod\":{},\"NodeNames\":[\"a\tb\"]}", "{\"Pod\":{},\"NodeNames\":[\"a\nb\"]}", "{\"Pod\":{},\"NodeNames\":[\"\x7f\"]}",
	`{"Pod":{},"NodeNames":[],"x":01}`, `{"Pod":{},"NodeNames":[],"x":-}`, `{"Pod":{},"NodeNames":[],"x":1.}`, `{"Pod":{},"NodeNames":[],"x":.5}`,
	`{"Pod":{},"NodeNames":[],"x":1e}`, `{"Pod":{},"NodeNames":[],"x":1e+}`, `{"Pod":{},"NodeNames":[],"x":+1}`, `{"Pod":{},"NodeNames":[],"x":-0.0e-0}`,
	`{"Pod":{},"NodeNames":[],"x":0x10}`, `{"Pod":{},"NodeNames":[],"x":Infinity}`, `{"Pod":{},"NodeNames":[],"x":NaN}`,
	`{"Pod":{},"NodeNames":[],"x":tru}`, `{"Pod":{},"NodeNames":[],"x":truee}`, `{"Pod":{},"NodeNames":[],"x":nul}`, `{"Pod":{},"NodeNames":[],"x":nulll}`,
	`{"Pod":{},"NodeNames":[nul]}`, `{"Pod":nul,"NodeNames":[]}`, `{"Pod":{},"NodeNames":nul}`, `{"Pod":{},"Nodes":{"items":[nul]}}`,
	`{"Pod":{},"NodeNames":[],"x":[1 2]}`, `{"Pod":{},"NodeNames":[],"x":{"a" 1}}`, `{"Pod":{},"NodeNames":[],"x":{"a":1,}}`, `{"Pod":{},"NodeNames":[],"x":{1:1}}`,
	"\xef\xbb\xbf{\"Pod\":{},\"NodeNames\":[]}", "{\"Pod\":{},\"NodeNames\":[]}\x00", "{\"Pod\":{},\u00a0\"NodeNames\":[]}",
	`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"}}]}`, `{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"}]}}`,
}

func TestDecodeExtenderArgsMatchesStdlib(t *testing.T) {
	for i, tc := range decoderCases {
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkSameAsStdlib(t, []byte(tc)) })
	}
}

// TestDecodeExtenderArgsNesting checks encoding/json's depth limit of 10000
// nested arrays and objects, which the fast decoder shares.
func TestDecodeExtenderArgsNesting(t *testing.T) {
	for _, depth := range []int{9998, 9999, 10000, 10001} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			// The top-level object is one level.
			inner := strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1)
			checkSameAsStdlib(t, []byte(`{"Pod":{},"NodeNames":[],"x":`+inner+`}`))
			inner = strings.Repeat(`{"a":`, depth-1) + "1" + strings.Repeat("}", depth-1)
			checkSameAsStdlib(t, []byte(`{"Pod":{},"NodeNames":[],"x":`+inner+`}`))
		})
	}
}

// TestDecodeExtenderArgsRealisticNodes decodes what kube-scheduler sends.
func TestDecodeExtenderArgsRealisticNodes(t *testing.T) {
	list := &v1.NodeList{}
	for i := range 20 {
		n := realisticNode(i)
		if i%3 == 0 {
			n.Annotations["capscale.io/underlay-ip-capacity"] = fmt.Sprint(i)
		}
		list.Items = append(list.Items, n)
	}
	names := []string{"a", "b"}
	for _, args := range []*extenderv1.ExtenderArgs{
		{Pod: pod("p", "", 2), Nodes: list},
		{Pod: pod("p", "", 1), NodeNames: &names},
	} {
		data := mustJSON(t, args)
		checkSameAsStdlib(t, data)
		indented, err := json.MarshalIndent(args, "", "\t")
		if err != nil {
			t.Fatal(err)
		}
		checkSameAsStdlib(t, indented)
	}
}

func FuzzDecodeExtenderArgsEquivalence(f *testing.F) {
	for _, tc := range decoderCases {
		f.Add([]byte(tc))
	}
	seed(f, nodesArgs(pod("p", "", 2), node("a", ""), node("late", "4"), node("bad", "-1")))
	n := realisticNode(1)
	seed(f, &extenderv1.ExtenderArgs{Pod: pod("p", "", 1), Nodes: &v1.NodeList{Items: []v1.Node{n}}})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSameAsStdlib(t, data)
	})
}

// allPlain reports whether every name is written by encoding/json as itself
// in quotes.
func allPlain(names []string) bool {
	for _, n := range names {
		if b, _ := json.Marshal(n); string(b) != `"`+n+`"` {
			return false
		}
	}
	return true
}

// decodeExtenderArgsStdlib is DecodeExtenderArgs with encoding/json: the
// reference the fast decoder is tested against.
func decodeExtenderArgsStdlib(data []byte) (*Args, error) {
	var wire struct {
		Pod       *podArgs
		NodeNames *[]string
		Nodes     *NodeItems
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return nil, fmt.Errorf("decoding ExtenderArgs: %w", err)
	}
	return validateArgs(&Args{Pod: wire.Pod.pod(), NodeNames: wire.NodeNames, Nodes: wire.Nodes})
}

// TestDecodeExtenderArgsRealisticPod decodes a Pod as kube-scheduler sends
// it, managedFields and status included: the slim Pod must give the same
// need, identity and priority as the whole one (checkSameAsStdlib).
func TestDecodeExtenderArgsRealisticPod(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	prio := int32(1000)
	p := pod("web-0", "", 2)
	p.UID = "0b5e9c1d-7a3f-4c55-9a7e-2f1d6c3b8e41"
	p.Labels = map[string]string{"app": "web"}
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:containers":{}}}`)}}
	p.Spec.Priority = &prio
	p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "cpu", Image: "img", Resources: v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")}}})
	p.Spec.InitContainers = []v1.Container{
		{Name: "sidecar", RestartPolicy: &always, Resources: v1.ResourceRequirements{Requests: underlayList(1)}},
		{Name: "init", Resources: v1.ResourceRequirements{Limits: underlayList(4)}},
	}
	p.Spec.Overhead = underlayList(1)
	p.Status = v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: "Unschedulable"}}}
	data := mustJSON(t, &extenderv1.ExtenderArgs{Pod: p, NodeNames: &[]string{"a", "b"}})
	checkSameAsStdlib(t, data)
	args, err := DecodeExtenderArgs(data)
	if err != nil {
		t.Fatal(err)
	}
	// Sidecar 1 + max(init 4, sidecar 1 + containers 2) + overhead 1.
	if got, want := underlay.PodNeed(args.Pod), underlay.PodNeed(p); got != want || want != 6 {
		t.Errorf("need %d from the decoded Pod, %d from the original (want 6)", got, want)
	}
	if args.Pod.UID != p.UID || args.Pod.Name != "web-0" || *args.Pod.Spec.Priority != prio {
		t.Errorf("decoded Pod %s %s %v", args.Pod.UID, args.Pod.Name, args.Pod.Spec.Priority)
	}
	// A field the extender does not read is not judged: kube-scheduler
	// sends a valid Pod, and only the fields read decide anything.
	if _, err := DecodeExtenderArgs([]byte(`{"Pod":{"spec":{"hostname":5}},"NodeNames":["a"]}`)); err != nil {
		t.Errorf("a type error in a field the extender does not read: %v", err)
	}
	if _, err := DecodeExtenderArgs([]byte(`{"Pod":{"spec":{"priority":"high"}},"NodeNames":["a"]}`)); err == nil {
		t.Errorf("a type error in spec.priority was accepted")
	}
}

func underlayList(n int64) v1.ResourceList {
	return v1.ResourceList{v1.ResourceName(names.UnderlayIPResource): *resource.NewQuantity(n, resource.DecimalSI)}
}
