package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestAPIProfilerOncePerName(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/profile" || r.URL.Query().Get("seconds") != "2" {
			http.NotFound(w, r)
			return
		}
		asked.Add(1)
		_, _ = w.Write([]byte("profile"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	p, err := newAPIProfiler(&rest.Config{Host: srv.URL + "/"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.start(ctx, "50-capscale's watch, alone", 2*time.Second)()
	p.start(ctx, "50-capscale's watch, alone", 2*time.Second)() // the first round of a kind only
	if n := asked.Load(); n != 1 {
		t.Fatalf("asked %d times, want once", n)
	}
	b, err := os.ReadFile(filepath.Join(dir, "kube-apiserver-50-capscales-watch-alone.pprof"))
	if err != nil || string(b) != "profile" {
		t.Fatalf("profile file: %q, %v", b, err)
	}
	var none *apiProfiler // no --source-churn-profiles
	none.start(ctx, "idle", time.Second)()
}

func TestAPIProfilerNoProfiling(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler()) // kube-apiserver --profiling=false
	defer srv.Close()
	dir := t.TempDir()
	p, err := newAPIProfiler(&rest.Config{Host: srv.URL}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.fetch(context.Background(), filepath.Join(dir, "x.pprof"), time.Second); err == nil {
		t.Fatal("a 404 was taken for a profile")
	}
	if _, err := os.Stat(filepath.Join(dir, "x.pprof")); !os.IsNotExist(err) {
		t.Fatalf("a file was written for a failed profile: %v", err)
	}
}
