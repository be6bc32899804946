package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// API traffic per unit of work (a pod, a budget change), read from
// kube-apiserver's own metrics: the writes (apiserver_request_total by
// verb, resource and subresource), the bytes of their bodies
// (apiserver_request_body_size_bytes' sums, by resource and verb) and the
// watch events it sent (apiserver_watch_events_total and
// apiserver_watch_events_sizes' sums, by resource: an event counts once for
// every watcher it went to, so these are the bytes on the wire). Leases are
// left out: their renewals (the nodes', the components' leader elections)
// are the plane's heartbeat, not the work measured, and come in bursts that
// an idle rate cannot take off a window of a few seconds.

// traffic is one window's API traffic.
type traffic struct {
	// Writes are write requests by verb/resource[/subresource].
	Writes map[string]float64 `json:"writes"`
	// WriteBytes are the bytes of write bodies by resource/verb.
	WriteBytes map[string]float64 `json:"write_bytes"`
	// WatchEvents and WatchBytes are the watch events sent, and their
	// bytes, by resource.
	WatchEvents map[string]float64 `json:"watch_events"`
	WatchBytes  map[string]float64 `json:"watch_bytes"`
}

// writeVerbs are apiserver_request_total's verbs that change an object.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// sums returns the sample sum of each series of a histogram family keyed by
// the values of the given labels, joined with "/".
func (f metricFamilies) sums(name string, keys ...string) map[string]float64 {
	return f.byLabels(name, keys, func(m *dto.Metric) (float64, bool) {
		h := m.GetHistogram()
		return h.GetSampleSum(), h != nil
	})
}

// apiTraffic is what kube-apiserver did between two scrapes of its
// /metrics; series that did not grow are left out.
func apiTraffic(before, after metricFamilies) traffic {
	t := traffic{Writes: map[string]float64{}, WriteBytes: map[string]float64{}, WatchEvents: map[string]float64{}, WatchBytes: map[string]float64{}}
	// resource is where a key (verb/resource[/subresource], resource/verb
	// or resource) names its resource.
	grew := func(dst map[string]float64, b, a map[string]float64, resource int, keep func(string) bool) {
		for k, v := range a {
			if parts := strings.Split(k, "/"); len(parts) > resource && parts[resource] == "leases" {
				continue
			}
			if d := v - b[k]; d > 0 && keep(k) {
				dst[k] = d
			}
		}
	}
	all := func(string) bool { return true }
	grew(t.Writes, before.counters("apiserver_request_total", "verb", "resource", "subresource"),
		after.counters("apiserver_request_total", "verb", "resource", "subresource"), 1,
		func(k string) bool { verb, _, _ := strings.Cut(k, "/"); return writeVerbs[verb] })
	grew(t.WriteBytes, before.sums("apiserver_request_body_size_bytes", "resource", "verb"), after.sums("apiserver_request_body_size_bytes", "resource", "verb"), 0, all)
	grew(t.WatchEvents, before.counters("apiserver_watch_events_total", "resource"), after.counters("apiserver_watch_events_total", "resource"), 0, all)
	grew(t.WatchBytes, before.sums("apiserver_watch_events_sizes", "resource"), after.sums("apiserver_watch_events_sizes", "resource"), 0, all)
	return t
}

// perUnit charges a window's traffic (flat's shape) to its units of work,
// less what the plane sends when idle (idle is per wall second), as
// cpuMsPerPod does with CPU; a key below its idle rate is charged 0, and
// each kind's total is the sum of what its keys were charged.
func perUnit(window, idle map[string]float64, wall time.Duration, units int) map[string]float64 {
	out := map[string]float64{}
	if units <= 0 {
		return out
	}
	for _, kind := range trafficKinds {
		out[kind] = 0
	}
	for k, v := range window {
		kind := kindOf(k)
		if kind == "" || kind == k {
			continue // a total: the sum of its keys, below
		}
		if d := v - idle[k]*wall.Seconds(); d > 0 {
			out[k] = d / float64(units)
			out[kind] += out[k]
		}
	}
	return out
}

// trafficKinds are flat's kinds, each a total and a prefix of its keys.
var trafficKinds = []string{"writes", "write bytes", "watch events", "watch bytes"}

// kindOf is the kind of a flat key: the total itself, or the kind its key
// starts with ("" for neither).
func kindOf(k string) string {
	for _, kind := range trafficKinds {
		if k == kind || strings.HasPrefix(k, kind+" ") {
			return kind
		}
	}
	return ""
}

// flat is t as one map, each key prefixed by its kind (trafficKinds), with
// the totals of each kind under the bare kind: the shape the rounds'
// medians are taken over.
func (t traffic) flat() map[string]float64 {
	out := map[string]float64{}
	for i, m := range []map[string]float64{t.Writes, t.WriteBytes, t.WatchEvents, t.WatchBytes} {
		kind := trafficKinds[i]
		out[kind] = total(m)
		for k, v := range m {
			out[kind+" "+k] = v
		}
	}
	return out
}

// trafficFigure says a side's traffic (flat's keys, medians of rounds) the
// way BENCHMARKS.md's rows do: the totals, then the resources that carry
// it, largest first.
func trafficFigure(m map[string]float64) string {
	detail := func(kind string, unit func(float64) string) string {
		type kv struct {
			k string
			v float64
		}
		var parts []kv
		for k, v := range m {
			if rest, ok := strings.CutPrefix(k, kind+" "); ok && v >= 0.05*max(m[kind], 1e-9) {
				parts = append(parts, kv{rest, v})
			}
		}
		sort.Slice(parts, func(i, j int) bool {
			if parts[i].v != parts[j].v {
				return parts[i].v > parts[j].v
			}
			return parts[i].k < parts[j].k
		})
		s := make([]string, 0, len(parts))
		for _, p := range parts {
			s = append(s, p.k+" "+unit(p.v))
		}
		if len(s) == 0 {
			return unit(m[kind])
		}
		return unit(m[kind]) + " (" + strings.Join(s, ", ") + ")"
	}
	count := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	return fmt.Sprintf("writes %s; write bodies %s; watch events %s; watch bytes %s",
		detail("writes", count), detail("write bytes", kib), detail("watch events", count), detail("watch bytes", kib))
}

// kib prints bytes as KiB with two decimals.
func kib(b float64) string { return fmt.Sprintf("%.2f KiB", b/1024) }
