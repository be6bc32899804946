package app

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestNotReadyUntilSourcesRead: with --capacity-sources the extender is not
// ready, and its verbs answer 503, until it has read the sources, as until
// it has read the pods and nodes. Before that every node counts 0 ("not
// read yet"), and a replica answering then turns away pods that fit (CI,
// stop 77).
func TestNotReadyUntilSourcesRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(file, []byte(`sources:
- name: own-ipam
  resource: {group: ipam.example.com, version: v1, resource: nodeippools}
  node: object.spec.nodeName
  capacity: object.status.allocatable
  draws: marked
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o := parse(t, "--bind-address=127.0.0.1:0", "--await-capacity-source", "--capacity-sources="+file)
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatalf("Validate: %v", errs)
	}
	gvr := schema.GroupVersionResource{Group: "ipam.example.com", Version: "v1", Resource: "nodeippools"}
	sources := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "NodeIPPoolList"})
	var allowed atomic.Bool
	var refused atomic.Int32
	sources.PrependReactor("list", gvr.Resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if allowed.Load() {
			return false, nil, nil
		}
		refused.Add(1)
		return true, nil, apierrors.NewForbidden(gvr.GroupResource(), "", errors.New("not yet"))
	})
	cs := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	c, err := o.config(clients{main: cs, binds: cs, leases: cs, sources: sources}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, base := serveConfig(t, c, "http")
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(b)
	}

	// The pods and nodes are read; the sources' list was refused twice.
	for typ, ok := range c.Factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer of %v never synced", typ)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return refused.Load() >= 2, nil
	}); err != nil {
		t.Fatalf("the sources were never listed: %v", err)
	}
	if code, body := get(http.MethodGet, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the sources not read = %d %q, want 503", code, body)
	}
	if code, body := get(http.MethodPost, "/filter"); code != http.StatusServiceUnavailable || !strings.Contains(body, "capacity sources") {
		t.Errorf("/filter with the sources not read = %d %q, want 503 naming the capacity sources", code, body)
	}

	allowed.Store(true)
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _ := get(http.MethodGet, "/readyz")
		return code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("/readyz never 200 once the sources could be read: %v", err)
	}
}
