package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

func TestFilterResultWriteTo(t *testing.T) {
	names := []string{"a", "b"}
	raw := []byte(`{"metadata":{"name":"raw","annotations":{"k":"v"}},"status":{"images":[{"names":["x"]}]}}`)
	tests := []struct {
		name string
		res  *FilterResult
	}{
		{name: "names", res: &FilterResult{NodeNames: &names, FailedNodes: extenderv1.FailedNodesMap{"c": "full"},
			FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}}},
		{name: "nodes", res: &FilterResult{Nodes: &NodeItems{Items: []NodeItem{
			{Name: "raw", Raw: raw},
			{Name: "built", Annotations: map[string]string{"x": "y"}},
		}}, FailedNodes: extenderv1.FailedNodesMap{"d": `quote " and <html>`}}},
		{name: "empty nodes", res: &FilterResult{Nodes: &NodeItems{Items: []NodeItem{}}}},
		{name: "error only", res: &FilterResult{Error: "broken"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			n, err := tc.res.WriteTo(&buf)
			if err != nil || n != int64(buf.Len()) {
				t.Fatalf("WriteTo = %d, %v; wrote %d", n, err, buf.Len())
			}
			if !json.Valid(buf.Bytes()) {
				t.Fatalf("invalid JSON: %s", buf.Bytes())
			}
			// Same document as json.Marshal would give.
			want, err := json.Marshal(tc.res)
			if err != nil {
				t.Fatal(err)
			}
			var got, exp extenderv1.ExtenderFilterResult
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(want, &exp); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, exp) {
				t.Errorf("WriteTo decodes to %+v, json.Marshal to %+v", got, exp)
			}
		})
	}
}

type failingWriter struct{ after int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, errors.New("broken pipe")
	}
	f.after--
	return len(p), nil
}

func TestFilterResultWriteToError(t *testing.T) {
	res := &FilterResult{Nodes: &NodeItems{Items: []NodeItem{{Name: "a"}, {Name: "b"}}}}
	if _, err := res.WriteTo(&failingWriter{after: 2}); err == nil {
		t.Fatal("write error swallowed")
	}
}

func TestNodeItemDecode(t *testing.T) {
	var items NodeItems
	data := []byte(`{"items":[{"metadata":{"name":"a","annotations":{"capscale.io/underlay-ip-capacity":"3"}},"spec":{}} , null, {}]}`)
	if err := json.Unmarshal(data, &items); err != nil {
		t.Fatal(err)
	}
	if len(items.Items) != 3 || items.Items[0].Name != "a" || items.Items[0].Annotations["capscale.io/underlay-ip-capacity"] != "3" {
		t.Fatalf("items %+v", items.Items)
	}
	// The kept JSON is a copy, not a view into the decoder's input.
	data[len(`{"items":[{"metadata":{"name":"`)] = 'z'
	if !bytes.HasPrefix(items.Items[0].Raw, []byte(`{"metadata":{"name":"a"`)) {
		t.Errorf("raw JSON aliases the input: %s", items.Items[0].Raw)
	}
	if err := json.Unmarshal([]byte(`{"items":[{"metadata":{"name":5}}]}`), &items); err == nil {
		t.Error("a node with a numeric name was accepted")
	}
}
