package main

import (
	"strings"
	"testing"
	"time"
)

func TestDelivery(t *testing.T) {
	d := newDelivery()
	// Seen before the write returned: 0.
	d.seen("a", "5")
	d.written("a", "5")
	// Written, then an older version seen (the spec update), then its own.
	d.written("b", "7")
	d.seen("b", "6")
	time.Sleep(5 * time.Millisecond)
	d.seen("b", "7")
	got := d.take()
	if len(got) != 2 || got[0].lag != 0 || got[1].lag < 5 {
		t.Fatalf("lags %+v, want 0 for a and at least 5 ms for b", got)
	}
	if len(d.take()) != 0 {
		t.Error("take did not forget")
	}
}

func TestWindows(t *testing.T) {
	t0 := time.Now()
	samples := []sample{
		{at: t0},
		{at: t0.Add(5 * time.Second), busy: 10 * time.Second, plane: 9 * time.Second, self: time.Second,
			queue: queueSample{depth: 3, waitSum: 1, waitCount: 10, syncSum: 0.5, syncCount: 10}, work: 2 * time.Millisecond},
		{at: t0.Add(10 * time.Second), busy: 15 * time.Second, plane: 13 * time.Second, self: 1500 * time.Millisecond, steal: time.Second,
			etcd: etcdSample{compactions: 1, compactionMs: 900}, queue: queueSample{waitSum: 1, waitCount: 10, syncSum: 0.5, syncCount: 10}},
	}
	lags := []seenAt{{at: t0.Add(time.Second), lag: 1500}, {at: t0.Add(2 * time.Second), lag: 20}, {at: t0.Add(6 * time.Second), lag: 40}}
	watch := []seenAt{{at: t0.Add(time.Second), lag: 1400}}
	binds := []seenAt{{at: t0.Add(7 * time.Second), lag: 60}}
	got := windows(samples, lags, watch, binds, 5*time.Second)
	for _, want := range []string{
		"[ 0 s: lag max 1500 ms, 1 over 1 s, watch max 1400 ms, probe —; queue max 3, wait mean 100 ms, sync mean 50 ms; cores: plane 1.80, bench 0.20, other 0.00, steal 0.00; compactions 0 (0 ms); work 2000 µs]",
		"[ 5 s: lag max 40 ms, 0 over 1 s, watch max 0 ms, probe 60; queue max 3, wait mean 0 ms, sync mean 0 ms; cores: plane 0.80, bench 0.10, other 0.10, steal 0.20; compactions 1 (900 ms); work —]",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("windows:\n%s\nwant it to hold\n%s", got, want)
		}
	}
}

func TestMeansMs(t *testing.T) {
	sum := map[string]float64{"PATCH/nodes": 3, "PUT/ciliumnodes": 1}
	count := map[string]float64{"PATCH/nodes": 40, "PUT/ciliumnodes": 10}
	since := map[string]float64{"PATCH/nodes": 1, "PUT/ciliumnodes": 1}
	sinceCount := map[string]float64{"PATCH/nodes": 20, "PUT/ciliumnodes": 10}
	// PUT did not grow: left out; PATCH: 2 s over 20 requests.
	if got, want := meansMs(sum, count, since, sinceCount, "PUT/ciliumnodes", "PATCH/nodes"), "PATCH/nodes 100 ms (20)"; got != want {
		t.Errorf("meansMs = %q, want %q", got, want)
	}
	if got := meansMs(sum, count, sum, count, "PATCH/nodes"); got != "—" {
		t.Errorf("meansMs with nothing counted = %q, want —", got)
	}
}

// A watchOnly round rewrites only nodes the churn gave a value, with that
// value, so that capscale-controller has nothing to patch; the other
// rounds move on through the span.
func TestChange(t *testing.T) {
	r := &churnRun{span: 10, last: map[string]int{}}
	first := map[string]int{}
	for k := range 3 {
		node, c := r.change(withCapscale, k)
		first[node] = c
	}
	for k := range 6 {
		node, c := r.change(watchOnly, k)
		want, ok := first[node]
		if !ok || c != want {
			t.Fatalf("watchOnly change %d: %s at %d, want one of %v with its value", k, node, c, first)
		}
	}
	if node, c := r.change(ipamAlone, 3); first[node] != 0 || c == 0 {
		t.Errorf("the next change after the watchOnly round went to %s (%d), want a new node", node, c)
	}
}

// workTime reads the thread's own CPU time for the work: positive, and
// far below a second for 1 MiB hashed (a wall clock could be anything).
func TestWorkTime(t *testing.T) {
	d := workTime()
	if d <= 0 || d > time.Second {
		t.Fatalf("workTime = %s, want a positive CPU time under a second", d)
	}
	t.Logf("workTime = %s", d)
}
