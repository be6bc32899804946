package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTableRow(t *testing.T) {
	run := runInfo{
		Command: "go run ./e2e/cmd/benche2e --scenario delegate",
		Start:   time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC),
		Commit:  "5478d14", Kubernetes: "v1.37.2",
		Machine: "2 cores, linux/amd64, go1.26.8, load 0.52",
	}
	for _, tc := range []struct {
		name string
		in   row
		run  runInfo
		want string
	}{
		{
			name: "delegate",
			in:   delegateRows(0.670, 2.620, 1.479, 4.731)[0],
			run:  run,
			want: "| Forwarding to a delegate, p50 overhead | 0.809 ms (p50 1.479 against 0.670 ms direct; p99 4.731 against 2.620) | — | ≤ 1 ms (issue 10) | `go run ./e2e/cmd/benche2e --scenario delegate` | 2026-11-23 13:00 | 5478d14 | v1.37.2 | 2 cores, linux/amd64, go1.26.8, load 0.52 |",
		},
		{
			name: "no spread or goal prints a dash",
			in:   row{Measure: "m", Figure: "f"},
			run:  run,
			want: "| m | f | — | — | `go run ./e2e/cmd/benche2e --scenario delegate` | 2026-11-23 13:00 | 5478d14 | v1.37.2 | 2 cores, linux/amd64, go1.26.8, load 0.52 |",
		},
		{
			name: "pipes are escaped, the date is UTC, no commit or version a dash",
			in:   row{Measure: "a|b", Figure: "f", Spread: "1|2", Goal: "g"},
			run:  runInfo{Command: "x --extender-floor bind|filter", Start: time.Date(2026, 11, 24, 1, 30, 0, 0, time.FixedZone("CET", 3600)), Machine: "m"},
			want: "| a\\|b | f | 1\\|2 | g | `x --extender-floor bind\\|filter` | 2026-11-24 00:30 | — | — | m |",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tableRow(tc.in, tc.run); got != tc.want {
				t.Errorf("tableRow =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestTableHeaderIsBenchmarks: the rows benche2e prints have the columns of
// every table under BENCHMARKS.md's "Current figures".
func TestTableHeaderIsBenchmarks(t *testing.T) {
	b, err := os.ReadFile("../../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	start := strings.Index(page, "## Current figures")
	end := strings.Index(page[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("BENCHMARKS.md has no \"## Current figures\" section")
	}
	tables := 0
	for _, line := range strings.Split(page[start:start+1+end], "\n") {
		if strings.HasPrefix(line, "| measure |") {
			tables++
			if line != tableHeader {
				t.Errorf("a table of Current figures has the header\n%s\nbenche2e prints rows for\n%s", line, tableHeader)
			}
		}
	}
	if tables == 0 {
		t.Error("no table under Current figures")
	}
	if got := strings.Count(tableRow(row{Measure: "m", Figure: "f"}, runInfo{Machine: "x"}), " | ") + 1; got != strings.Count(tableHeader, " | ")+1 {
		t.Errorf("tableRow writes %d cells, the header has %d", got, strings.Count(tableHeader, " | ")+1)
	}
}

func TestMachineLabel(t *testing.T) {
	for _, tc := range []struct {
		name, loadavg, want string
	}{
		{name: "load", loadavg: "1.23 0.90 0.50", want: "2 cores, linux/amd64, go1.26.8, load 1.23"},
		{name: "unknown load", loadavg: "unknown", want: "2 cores, linux/amd64, go1.26.8"},
		{name: "no load", loadavg: "", want: "2 cores, linux/amd64, go1.26.8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := machineLabel(2, "linux", "amd64", "go1.26.8", tc.loadavg); got != tc.want {
				t.Errorf("machineLabel = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "bin-dir with its value dropped", args: []string{"--bin-dir", "_output/bin", "--scenario", "metrics"}, want: "go run ./e2e/cmd/benche2e --scenario metrics"},
		{name: "bin-dir= dropped", args: []string{"-bin-dir=/x", "--scenario=delegate"}, want: "go run ./e2e/cmd/benche2e --scenario=delegate"},
		{name: "no flags", want: "go run ./e2e/cmd/benche2e"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := commandLine(tc.args); got != tc.want {
				t.Errorf("commandLine(%q) = %q, want %q", tc.args, got, tc.want)
			}
		})
	}
}

func TestThroughputRows(t *testing.T) {
	ci := func(m, lo, hi float64) interval { return interval{Median: m, Lo: lo, Hi: hi, Coverage: 0.99} }
	rep := rigReport{
		Scenario: "extender", Nodes: 500,
		Sides: map[string]sideReport{
			"extender": {RoundsPodsPerS: make([]float64, 8), MedianPodsPerS: 106.1, MinPodsPerS: 96.1, MaxPodsPerS: 113.2, CPUMsPerPodTotal: 18.38,
				CPUMsPerPodCI95: map[string]interval{"kube-scheduler": ci(5.4, 5.1, 5.9), "extender": ci(1.71, 1.54, 1.82)}},
			"native": {RoundsPodsPerS: make([]float64, 8), MedianPodsPerS: 129.8, MinPodsPerS: 98, MaxPodsPerS: 169.4, CPUMsPerPodTotal: 15.9,
				CPUMsPerPodCI95: map[string]interval{"kube-scheduler": ci(4.9, 4.7, 5.2), "extender": ci(0.52, 0.5, 0.62)}},
		},
		RatioOfMedians: 0.817, PairedRatioMin: 0.66, PairedRatioMax: 1.1,
		PairedRateCI95: ci(0.85, 0.784, 0.943), PairedCPUCI95: ci(1.16, 1.05, 1.3),
	}
	got := throughputRows(rep, "extender", "native")
	want := []row{
		{
			Measure: "Scheduling rate, extender / native, 500 nodes",
			Figure:  "median paired ratio 0.850 [0.784–0.943]; ratio of medians 0.82 (paired rounds 0.66–1.10); 106.1 (96.1–113.2) against 129.8 (98.0–169.4) pods/s, 8 rounds",
			Goal:    "≥ 0.8 (issue 17)",
		},
		{
			Measure: "CPU ms per pod, extender / native, 500 nodes",
			Figure:  "all processes 18.38 / 15.90 (median paired ratio 1.160 [1.050–1.300]); kube-scheduler 5.40 [5.10–5.90] / 4.90 [4.70–5.20]; extender 1.71 [1.54–1.82] / 0.52 [0.50–0.62]",
			Goal:    "extender < 0.8 ms (issue 17)",
		},
	}
	if len(got) != len(want) {
		t.Fatalf("throughputRows gave %d rows, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d =\n%+v\nwant\n%+v", i, got[i], want[i])
		}
	}

	// Plugin modes run no extender: kube-scheduler's paired ratio instead.
	plugin := rep
	plugin.Scenario, plugin.PairedSchedCPUCI95 = "plugin-tax", ci(1.005, 0.964, 1.06)
	if got := throughputRows(plugin, "extender", "native")[1].Figure; strings.Contains(got, "extender") || !strings.HasSuffix(got, "(median paired ratio 1.005 [0.964–1.060])") {
		t.Errorf("plugin-tax CPU figure = %q, want kube-scheduler's paired ratio and no extender", got)
	}

	// The null extender is a reference: its rows carry no goal.
	rep.ExtenderFloor = "bind"
	for _, r := range throughputRows(rep, "extender", "native") {
		if r.Goal != "" || !strings.HasSuffix(r.Measure, ", null extender (bind)") {
			t.Errorf("floor row = %+v, want no goal and the floor named", r)
		}
	}
}

func TestScenarioRows(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []row
		want []row
	}{
		{
			name: "reaction",
			got:  reactionRows([]float64{1.08, 2.11, 2.5, 5.13, 5.83, 5.88, 12.5, 13.73, 14.76, 15.71}),
			want: []row{{Measure: "Reaction: load change → replicas changed", Figure: "max 15.71 s, median 5.88 s, min 1.08 s (10 changes)", Goal: "max ≤ 21 s (issue 7)"}},
		},
		{
			name: "reaction without changes",
			got:  reactionRows(nil),
		},
		{
			name: "memory without a baseline",
			got:  memoryRows(5000, 50000, "RSS 141.6 MiB (peak 141.6 MiB)", "RSS 123.6 MiB (peak 123.6 MiB)", "RSS 129.2 MiB (peak 129.2 MiB)", ""),
			want: []row{
				{Measure: "Extender memory, 5000 nodes, 50000 pods", Figure: "RSS 141.6 MiB (peak 141.6 MiB)", Goal: "< 150 MiB (issue 7)"},
				{Measure: "Adapter memory, 5000 nodes, 50000 pods", Figure: "RSS 123.6 MiB (peak 123.6 MiB); restarted: RSS 129.2 MiB (peak 129.2 MiB)", Goal: "< 150 MiB (issue 18)"},
			},
		},
		{
			name: "metrics, open loop",
			got:  metricsRows(300, 100, []pathFigures{{Path: "direct", OursP50: 1.08, OursP99: 4.86, FloorP50: 0.92, FloorP99: 4.13, OursRate: 299, FloorRate: 299}}),
			want: []row{{
				Measure: "External-metrics GET, capscale / floor, direct, open loop 300 req/s",
				Figure:  "p50 1.17, p99 1.18 (capscale p50 1.08 ms, p99 4.86 ms); throughput 1.00 (299 against 299 req/s)",
				Goal:    "latency ratio ≤ 1.2, direct p99 < 5 ms (issue 7)",
			}},
		},
		{
			name: "metrics, closed loop through the aggregator",
			got:  metricsRows(0, 100, []pathFigures{{Path: "aggregator", OursP50: 71.4, OursP99: 263.7, FloorP50: 86.8, FloorP99: 352.8, OursRate: 1151, FloorRate: 968}}),
			want: []row{{
				Measure: "External-metrics GET, capscale / floor, aggregator, closed loop, 100 clients",
				Figure:  "p50 0.82, p99 0.75 (capscale p50 71.40 ms, p99 263.70 ms); throughput 1.19 (1151 against 968 req/s)",
				Goal:    "latency ratio ≤ 1.2 (issue 7)",
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.got) != len(tc.want) {
				t.Fatalf("got %d rows, want %d: %+v", len(tc.got), len(tc.want), tc.got)
			}
			for i := range tc.want {
				if tc.got[i] != tc.want[i] {
					t.Errorf("row %d =\n%+v\nwant\n%+v", i, tc.got[i], tc.want[i])
				}
			}
		})
	}
}

func TestGoBenchRows(t *testing.T) {
	const out = `goos: linux
goarch: amd64
pkg: github.com/capscale/capscale/metricsadapter/provider
cpu: AMD EPYC
BenchmarkGetExternalMetric/load-index-2         	 1000000	      1050 ns/op	     883 B/op	       8 allocs/op
BenchmarkGetExternalMetric/qps-2                	  300000	      3700 ns/op	    1696 B/op	      35 allocs/op
PASS
ok  	github.com/capscale/capscale/metricsadapter/provider	3.1s
pkg: github.com/capscale/capscale/extender
BenchmarkFilter/NodeNames-5000-2   	    1634	    731234 ns/op	  41.00 MB/s	  283115 B/op	      63 allocs/op
BenchmarkFilter/FullNodes-5000-2   	       6	1630000000 ns/op
BenchmarkBroken-2 x 1 ns/op
`
	got, err := goBenchRows(strings.NewReader(out), 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{Measure: "metricsadapter/provider BenchmarkGetExternalMetric/load-index", Figure: "1.05 µs/op, 883 B/op, 8 allocs/op"},
		{Measure: "metricsadapter/provider BenchmarkGetExternalMetric/qps", Figure: "3.7 µs/op, 1696 B/op, 35 allocs/op"},
		{Measure: "extender BenchmarkFilter/NodeNames-5000", Figure: "731 µs/op, 41.00 MB/s, 283115 B/op, 63 allocs/op"},
		{Measure: "extender BenchmarkFilter/FullNodes-5000", Figure: "1.63 s/op"},
	}
	if len(got) != len(want) {
		t.Fatalf("goBenchRows gave %d rows, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseRates(t *testing.T) {
	for in, want := range map[string][]int{"": nil, "50": {50}, "10, 25,50": {10, 25, 50}} {
		got, err := parseRates(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseRates(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-5", "ten", "10,x"} {
		if _, err := parseRates(in); err == nil {
			t.Errorf("parseRates(%q) accepted", in)
		}
	}
}
