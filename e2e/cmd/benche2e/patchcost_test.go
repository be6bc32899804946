package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Each form reaches kube-apiserver as its own request: its patch type as
// the Content-Type and its fieldValidation as the query, the same body.
func TestNodePatcherSendsTheForm(t *testing.T) {
	type seen struct{ contentType, validation, body string }
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, seen{r.Header.Get("Content-Type"), r.URL.Query().Get("fieldValidation"), string(b)})
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}`)
	}))
	defer srv.Close()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	p := &nodePatcher{client: c}
	for _, f := range patchForms {
		if err := p.send(context.Background(), "n", "7", f); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
	}
	if len(got) != len(patchForms) {
		t.Fatalf("%d requests, want %d", len(got), len(patchForms))
	}
	for i, f := range patchForms {
		if got[i].contentType != string(f.pt) || got[i].validation != f.validation {
			t.Errorf("%s: sent %q with fieldValidation %q", f.name, got[i].contentType, got[i].validation)
		}
		if got[i].body != got[0].body || !strings.Contains(got[i].body, `"7"`) {
			t.Errorf("%s: body %s, want the same annotation patch as %s", f.name, got[i].body, got[0].body)
		}
	}
}

func TestNodePatchCostRefusesBadInput(t *testing.T) {
	for _, c := range []struct{ nodes, rate, rounds int }{{0, 100, 3}, {1000, 0, 3}, {1000, 100, 0}} {
		err := nodePatchCost(context.Background(), c.nodes, c.rate, c.rounds, 20*time.Second, t.TempDir(), time.Minute)
		if err == nil || !strings.Contains(err.Error(), "node-patch: want") {
			t.Errorf("%+v: %v, want the input refused before any plane starts", c, err)
		}
	}
}
