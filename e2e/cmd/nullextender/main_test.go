package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

func TestOfferedNames(t *testing.T) {
	names := []string{"node-a", "node-b.example", "node-c"}
	// A label with the field's key must not be taken for the field.
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"NodeNames": "x"}}}
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := offeredNames(body)
	if err != nil {
		t.Fatal(err)
	}
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(append(append([]byte(`{"NodeNames":`), raw...), '}'), &res); err != nil {
		t.Fatalf("answer does not decode: %v", err)
	}
	if res.NodeNames == nil || !slices.Equal(*res.NodeNames, names) {
		t.Fatalf("answered %v, want %v", res.NodeNames, names)
	}

	nodes, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, Nodes: &v1.NodeList{}})
	for _, bad := range [][]byte{nodes, []byte(`{"NodeNames":null}`), []byte(`{"NodeNames":["a"`)} {
		if _, err := offeredNames(bad); err == nil {
			t.Errorf("offeredNames(%s) succeeded, want an error", bad)
		}
	}
}

// The server answers filter with the offered names, refuses a body without
// them, and binds through the clientset with the pod's UID and node.
func TestHandler(t *testing.T) {
	cs := fake.NewClientset()
	var bound *v1.Binding
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		bound = a.(k8stesting.CreateAction).GetObject().(*v1.Binding)
		return true, bound, nil
	})
	srv := httptest.NewServer(handler(cs))
	defer srv.Close()
	post := func(path string, body any) (*http.Response, []byte) {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp, out
	}

	// Enough names that net/http would chunk an answer without a length.
	var names []string
	for i := range 500 {
		names = append(names, fmt.Sprintf("kwok-node-%d", i))
	}
	resp, out := post("/filter", extenderv1.ExtenderArgs{Pod: &v1.Pod{}, NodeNames: &names})
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(out, &res); resp.StatusCode != http.StatusOK || err != nil || res.NodeNames == nil || !slices.Equal(*res.NodeNames, names) {
		t.Fatalf("filter: %d %s (%v)", resp.StatusCode, out, err)
	}
	if resp.ContentLength != int64(len(out)) {
		t.Errorf("filter answer has Content-Length %d for %d bytes", resp.ContentLength, len(out))
	}
	if resp, out := post("/filter", extenderv1.ExtenderArgs{Pod: &v1.Pod{}, Nodes: &v1.NodeList{}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("filter with full Nodes: %d %s, want 400", resp.StatusCode, out)
	}

	resp, out = post("/bind", extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "ns", PodUID: "u1", Node: "n2"})
	var br extenderv1.ExtenderBindingResult
	if err := json.Unmarshal(out, &br); resp.StatusCode != http.StatusOK || err != nil || br.Error != "" {
		t.Fatalf("bind: %d %s (%v)", resp.StatusCode, out, err)
	}
	if bound == nil || bound.Namespace != "ns" || bound.Name != "p" || bound.UID != "u1" || bound.Target.Name != "n2" {
		t.Errorf("Binding created: %+v", bound)
	}
}
