package main

import (
	"encoding/json"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
