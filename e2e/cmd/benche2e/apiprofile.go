package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// apiProfiler takes kube-apiserver's CPU profile (its /debug/pprof, on by
// default, read as the plane's admin) over the first window of each name:
// where the plane's CPU goes in an idle window and in each kind of round.
type apiProfiler struct {
	dir   string
	hc    *http.Client
	host  string
	mu    sync.Mutex
	taken map[string]bool
}

// newAPIProfiler is nil (profiles nothing) when dir is "".
func newAPIProfiler(cfg *rest.Config, dir string) (*apiProfiler, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &apiProfiler{dir: dir, hc: hc, host: strings.TrimSuffix(cfg.Host, "/"), taken: map[string]bool{}}, nil
}

// start profiles d into dir/kube-apiserver-<name>.pprof in the background,
// once a name; the returned function waits for it.
func (p *apiProfiler) start(ctx context.Context, name string, d time.Duration) func() {
	if p == nil {
		return func() {}
	}
	file := "kube-apiserver-" + strings.NewReplacer(" ", "-", "'", "", ",", "").Replace(name) + ".pprof"
	p.mu.Lock()
	done := p.taken[file]
	p.taken[file] = true
	p.mu.Unlock()
	if done {
		return func() {}
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		if err := p.fetch(ctx, filepath.Join(p.dir, file), d); err != nil {
			fmt.Printf("# kube-apiserver profile %s: %v\n", file, err)
		}
	}()
	return func() { <-ch }
}

func (p *apiProfiler) fetch(ctx context.Context, path string, d time.Duration) error {
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.host, max(int(d.Seconds()), 1))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %.200s", resp.Status, b)
	}
	return os.WriteFile(path, b, 0o644)
}
