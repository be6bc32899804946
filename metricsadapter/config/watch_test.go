package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

const oneSource = `
sources:
  - name: %s
    url: http://127.0.0.1:1/load
    jsonPath: '{.load}'
    interval: 10s
    timeout: 1s
    maxAge: 1m
`

func sourceConfig(name string) string { return strings.Replace(oneSource, "%s", name, 1) }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func reloads(t *testing.T, m *Metrics, result string) float64 {
	t.Helper()
	return testutil.ToFloat64(m.reloads.WithLabelValues(result))
}

func TestWatcherReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	writeFile(t, path, sourceConfig("first"))
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	m := NewMetrics()
	if err := m.Register(prometheus.NewPedanticRegistry()); err != nil {
		t.Fatal(err)
	}

	var applied []string
	var applyErr error
	apply := func(c *Config) error {
		if applyErr != nil {
			return applyErr
		}
		applied = append(applied, c.Sources[0].Name)
		return nil
	}
	w, err := NewWatcher(path, time.Second, clk, m, apply)
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	ctx := context.Background()

	steps := []struct {
		name        string
		content     string // empty: leave the file alone
		applyErr    error
		wantChanged bool
		wantCurrent string
		wantSuccess float64
		wantFailure float64
	}{
		{name: "unchanged file", wantCurrent: "first", wantSuccess: 1},
		{name: "valid change", content: sourceConfig("second"), wantChanged: true, wantCurrent: "second", wantSuccess: 2},
		{name: "invalid change keeps old", content: sourceConfig("second") + "bogus: true\n", wantCurrent: "second", wantSuccess: 2, wantFailure: 1},
		{name: "same invalid file is counted once", wantCurrent: "second", wantSuccess: 2, wantFailure: 1},
		{name: "validation error keeps old", content: strings.Replace(sourceConfig("third"), "timeout: 1s", "timeout: 0s", 1), wantCurrent: "second", wantSuccess: 2, wantFailure: 2},
		{name: "apply error keeps old", content: sourceConfig("fourth"), applyErr: errors.New("caFile unreadable"), wantCurrent: "second", wantSuccess: 2, wantFailure: 3},
		{name: "same apply error is counted once", applyErr: errors.New("caFile unreadable"), wantCurrent: "second", wantSuccess: 2, wantFailure: 3},
		{name: "apply retried once it works", wantChanged: true, wantCurrent: "fourth", wantSuccess: 3, wantFailure: 3},
	}
	for _, st := range steps {
		if st.content != "" {
			writeFile(t, path, st.content)
		}
		applyErr = st.applyErr
		if got := w.Check(ctx); got != st.wantChanged {
			t.Errorf("%s: Check() = %v, want %v", st.name, got, st.wantChanged)
		}
		if got := w.Current().Sources[0].Name; got != st.wantCurrent {
			t.Errorf("%s: current source = %q, want %q", st.name, got, st.wantCurrent)
		}
		if got := reloads(t, m, "success"); got != st.wantSuccess {
			t.Errorf("%s: success reloads = %v, want %v", st.name, got, st.wantSuccess)
		}
		if got := reloads(t, m, "failure"); got != st.wantFailure {
			t.Errorf("%s: failure reloads = %v, want %v", st.name, got, st.wantFailure)
		}
	}
	if want := []string{"first", "second", "fourth"}; strings.Join(applied, ",") != strings.Join(want, ",") {
		t.Errorf("applied %v, want %v", applied, want)
	}
}

func TestWatcherInitialErrors(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Now())
	ok := func(*Config) error { return nil }

	if _, err := NewWatcher(filepath.Join(dir, "missing.yaml"), time.Second, clk, NewMetrics(), ok); err == nil {
		t.Error("missing file: want an error")
	}
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "sources: [{name: x}]")
	if _, err := NewWatcher(bad, time.Second, clk, NewMetrics(), ok); err == nil || !strings.Contains(err.Error(), "sources[0].url") {
		t.Errorf("invalid file: err = %v, want a field error", err)
	}
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, sourceConfig("a"))
	if _, err := NewWatcher(good, time.Second, clk, NewMetrics(), func(*Config) error { return errors.New("boom") }); err == nil {
		t.Error("apply error: want an error")
	}
	if _, err := NewWatcher(good, 0, clk, NewMetrics(), ok); err == nil {
		t.Error("zero interval: want an error")
	}
}

// TestWatcherFollowsConfigMapSwap reproduces how the kubelet updates a
// ConfigMap volume: config.yaml -> ..data/config.yaml, ..data -> a new
// timestamped directory swapped in by rename.
func TestWatcherFollowsConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mkVersion := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "config.yaml"), content)
	}
	mkVersion("..v1", sourceConfig("v1"))
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), path); err != nil {
		t.Fatal(err)
	}

	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	applied := make(chan string, 4)
	w, err := NewWatcher(path, 2*time.Second, clk, NewMetrics(), func(c *Config) error {
		applied <- c.Sources[0].Name
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-applied; got != "v1" {
		t.Fatalf("initial apply = %q", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	mkVersion("..v2", sourceConfig("v2"))
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}

	// Wait for Run's ticker, then advance the fake clock past one interval.
	deadline := time.Now().Add(time.Minute)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("watcher never started its ticker")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Step(2 * time.Second)
	select {
	case got := <-applied:
		if got != "v2" {
			t.Errorf("applied %q after swap, want v2", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("swap not applied")
	}
}
