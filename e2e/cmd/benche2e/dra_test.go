package main

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/internal/names"
)

// scrapeOf parses a kube-apiserver /metrics text holding the families
// apiTraffic reads.
func scrapeOf(t *testing.T, claimCreates, slicePuts, leasePuts, gets, claimBytes, claimEvents, claimEventBytes float64) metricFamilies {
	t.Helper()
	text := `# TYPE apiserver_request_total counter
apiserver_request_total{verb="POST",resource="resourceclaims",subresource=""} ` + ftoa(claimCreates) + `
apiserver_request_total{verb="PUT",resource="resourceslices",subresource=""} ` + ftoa(slicePuts) + `
apiserver_request_total{verb="PUT",resource="leases",subresource=""} ` + ftoa(leasePuts) + `
apiserver_request_total{verb="GET",resource="pods",subresource=""} ` + ftoa(gets) + `
apiserver_request_total{verb="POST",resource="",subresource=""} ` + ftoa(gets) + `
# TYPE apiserver_request_body_size_bytes histogram
apiserver_request_body_size_bytes_bucket{group="resource.k8s.io",resource="resourceclaims",verb="create",le="+Inf"} ` + ftoa(claimCreates) + `
apiserver_request_body_size_bytes_sum{group="resource.k8s.io",resource="resourceclaims",verb="create"} ` + ftoa(claimBytes) + `
apiserver_request_body_size_bytes_count{group="resource.k8s.io",resource="resourceclaims",verb="create"} ` + ftoa(claimCreates) + `
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="resource.k8s.io",version="v1",resource="resourceclaims"} ` + ftoa(claimEvents) + `
# TYPE apiserver_watch_events_sizes histogram
apiserver_watch_events_sizes_bucket{group="resource.k8s.io",version="v1",resource="resourceclaims",le="+Inf"} ` + ftoa(claimEvents) + `
apiserver_watch_events_sizes_sum{group="resource.k8s.io",version="v1",resource="resourceclaims"} ` + ftoa(claimEventBytes) + `
apiserver_watch_events_sizes_count{group="resource.k8s.io",version="v1",resource="resourceclaims"} ` + ftoa(claimEvents) + `
`
	f, err := parseMetrics([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func ftoa(v float64) string { b, _ := json.Marshal(v); return string(b) }

// TestAPITraffic: writes only (no reads), body bytes and watch events by
// resource, Leases and series that did not move left out; perUnit takes the
// idle plane's rate off and charges the rest to the pods.
func TestAPITraffic(t *testing.T) {
	before := scrapeOf(t, 10, 2, 100, 50, 10*1500, 30, 30*2000)
	after := scrapeOf(t, 110, 2, 150, 900, 110*1500, 330, 330*2000)
	got := apiTraffic(before, after).flat()
	want := map[string]float64{
		"writes": 950, "writes POST/resourceclaims": 100, "writes POST": 850,
		"write bytes": 150000, "write bytes resourceclaims/create": 150000,
		"watch events": 300, "watch events resourceclaims": 300,
		"watch bytes": 600000, "watch bytes resourceclaims": 600000,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("apiTraffic(...).flat() =\n%v\nwant\n%v", got, want)
	}
	// 10 s at 85 POSTs of no resource a second were idle work, not the
	// 100 pods'; each total is what its keys were charged.
	idle := map[string]float64{"writes": 85, "writes POST": 85}
	per := perUnit(got, idle, 10*time.Second, 100)
	if per["writes"] != 1 || per["writes POST/resourceclaims"] != 1 || per["watch events"] != 3 {
		t.Errorf("perUnit = %v, want 1 write and 3 watch events a pod", per)
	}
	if _, ok := per["writes POST"]; ok {
		t.Errorf("perUnit charged the idle writes: %v", per)
	}
	// A total is never taken off on its own: the budget-change rows once
	// said "writes 0.00 (PATCH/nodes 1.00, PUT/resourceslices 1.00)".
	if per := perUnit(got, map[string]float64{"writes": 1000}, time.Second, 100); per["writes"] != 9.5 {
		t.Errorf("perUnit with an idle total: writes %v, want 9.5, the sum of its keys", per["writes"])
	}
	if len(perUnit(got, nil, time.Second, 0)) != 0 {
		t.Error("perUnit with no units charged something")
	}
	fig := trafficFigure(per)
	for _, s := range []string{"writes 1.00 (POST/resourceclaims 1.00)", "write bodies 1.46 KiB (resourceclaims/create 1.46 KiB)", "watch events 3.00 (resourceclaims 3.00)", "watch bytes 5.86 KiB"} {
		if !strings.Contains(fig, s) {
			t.Errorf("trafficFigure = %q, want it to hold %q", fig, s)
		}
	}
}

// TestDRASchedulerConfig: dra mode's scheduler scores the plain resource
// with capscale.io/underlay-ip's weight, and keeps native mode's profile
// otherwise.
func TestDRASchedulerConfig(t *testing.T) {
	file, flags, err := schedulerConfig(0, "dra", false)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(file)
	if len(flags) != 0 {
		t.Errorf("flags %v without a client QPS", flags)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			PluginConfig  []struct {
				Name string `json:"name"`
				Args struct {
					ScoringStrategy struct {
						Resources []struct {
							Name   string `json:"name"`
							Weight int    `json:"weight"`
						} `json:"resources"`
					} `json:"scoringStrategy"`
				} `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "default-scheduler" {
		t.Fatalf("profiles %+v, want native mode's default-scheduler", cfg.Profiles)
	}
	weights := map[string]int{}
	for _, pc := range cfg.Profiles[0].PluginConfig {
		for _, r := range pc.Args.ScoringStrategy.Resources {
			weights[r.Name] = r.Weight
		}
	}
	if weights[names.UnderlayIPResource] == 0 || weights[string(nativeResource)] != weights[names.UnderlayIPResource] {
		t.Errorf("scoring weights %v, want the plain resource's equal to %s's", weights, names.UnderlayIPResource)
	}
	// dra-unscored: neither resource in the scoring strategy.
	unscored, _, err := schedulerConfig(0, "dra-unscored", false)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(unscored)
	if b, err := os.ReadFile(unscored); err != nil || strings.Contains(string(b), names.UnderlayIPResource) || !strings.Contains(string(b), "LeastAllocated") {
		t.Errorf("dra-unscored's configuration scores an extended resource (%v):\n%s", err, b)
	}
	if err := draSchedulerConfig(map[string]any{"profiles": []any{}}, true); err == nil {
		t.Error("draSchedulerConfig of a configuration that scores nothing: no error")
	}
}

// TestStatusPatch: the plain arm's status write is native mode's (the
// marker and the resource in one nodes/status patch) for the plain
// resource.
func TestStatusPatch(t *testing.T) {
	var n corev1.Node
	if err := json.Unmarshal(statusPatch(9), &n); err != nil {
		t.Fatalf("%s: %v", statusPatch(9), err)
	}
	c, a := n.Status.Capacity[nativeResource], n.Status.Allocatable[nativeResource]
	if c.Value() != 9 || a.Value() != 9 || n.Annotations[budgetMark+"-published"] != "9" {
		t.Errorf("statusPatch(9) = %s", statusPatch(9))
	}
}

func TestVerdict(t *testing.T) {
	ci := func(m, lo, hi float64) interval { return interval{Median: m, Lo: lo, Hi: hi, Coverage: 0.95} }
	for _, tc := range []struct {
		name    string
		ci      interval
		bound   float64
		atLeast bool
		want    string
	}{
		{"rate clear", ci(1.0, 0.96, 1.05), 0.95, true, "met"},
		{"rate under", ci(0.8, 0.7, 0.9), 0.95, true, "not met"},
		{"rate straddles, median above", ci(0.97, 0.9, 1.02), 0.95, true, "met on the median; the interval straddles it"},
		{"rate straddles, median below", ci(0.93, 0.9, 1.02), 0.95, true, "not met on the median; the interval straddles it"},
		{"rate at the bound", ci(0.95, 0.95, 0.99), 0.95, true, "met"},
		{"cpu within", ci(1.02, 0.98, 1.08), 1.10, false, "met"},
		{"cpu over", ci(1.3, 1.2, 1.4), 1.10, false, "not met"},
		{"cpu straddles", ci(1.05, 0.99, 1.15), 1.10, false, "met on the median; the interval straddles it"},
		{"no rounds", interval{Median: math.NaN()}, 1.10, false, "no rounds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := verdict(tc.ci, tc.bound, tc.atLeast); got != tc.want {
				t.Errorf("verdict = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDRARows: dra mode's rows carry issue 56's goals with their verdicts,
// kube-scheduler's paired ratio and the publisher's CPU, and the API
// traffic per pod.
func TestDRARows(t *testing.T) {
	ci := func(m, lo, hi float64) interval { return interval{Median: m, Lo: lo, Hi: hi, Coverage: 0.96} }
	rep := rigReport{
		Scenario: "dra", Nodes: 500,
		Sides: map[string]sideReport{
			"dra": {RoundsPodsPerS: make([]float64, 8), MedianPodsPerS: 150, CPUMsPerPodTotal: 16,
				CPUMsPerPodCI95: map[string]interval{"kube-scheduler": ci(4.4, 4.2, 4.6), "extender": ci(0.3, 0.2, 0.4)},
				TrafficPerPod:   map[string]float64{"writes": 4, "writes POST/resourceclaims": 1}},
			"native": {RoundsPodsPerS: make([]float64, 8), MedianPodsPerS: 160, CPUMsPerPodTotal: 14,
				CPUMsPerPodCI95: map[string]interval{"kube-scheduler": ci(4, 3.9, 4.1), "extender": ci(0.2, 0.1, 0.3)},
				TrafficPerPod:   map[string]float64{"writes": 2}},
		},
		PairedRateCI95: ci(0.94, 0.9, 0.99), PairedCPUCI95: ci(1.14, 1.1, 1.2), PairedSchedCPUCI95: ci(1.1, 1.05, 1.15),
	}
	rows := throughputRows(rep, "dra", "native")
	if len(rows) != 3 {
		t.Fatalf("%d rows, want rate, CPU and API traffic: %+v", len(rows), rows)
	}
	if rows[0].Goal != "≥ 0.95 (issue 56): not met on the median; the interval straddles it" {
		t.Errorf("rate goal %q", rows[0].Goal)
	}
	if rows[1].Goal != "kube-scheduler within 10% (issue 56): met on the median; the interval straddles it" {
		t.Errorf("CPU goal %q", rows[1].Goal)
	}
	if !strings.Contains(rows[1].Figure, "(median paired ratio 1.100 [1.050–1.150])") || !strings.Contains(rows[1].Figure, "extender 0.30 [0.20–0.40] / 0.20 [0.10–0.30]") {
		t.Errorf("CPU figure %q, want kube-scheduler's paired ratio and the publisher's CPU", rows[1].Figure)
	}
	if !strings.HasPrefix(rows[2].Measure, "API traffic per pod, dra / native, 500 nodes") ||
		!strings.Contains(rows[2].Figure, "dra: writes 4.00 (POST/resourceclaims 1.00)") || !strings.Contains(rows[2].Figure, "native: writes 2.00;") {
		t.Errorf("API row %+v", rows[2])
	}
}

// TestBudgetReport: each arm's medians over its rounds, a key a round
// did not see counted 0 there, and one row an arm.
func TestBudgetReport(t *testing.T) {
	rounds := map[string][]budgetRound{
		armSlice: {
			{CPU: map[string]float64{"kube-scheduler": 1, "extender": 2}, Traffic: map[string]float64{"writes": 2, "writes PUT/resourceslices": 1}, SliceWrites: 1},
			{CPU: map[string]float64{"kube-scheduler": 3, "extender": 2}, Traffic: map[string]float64{"writes": 2, "writes PUT/resourceslices": 1}, SliceWrites: 1},
			{CPU: map[string]float64{"kube-scheduler": 2, "extender": 4}, Traffic: map[string]float64{"writes": 3}, SliceWrites: 1},
		},
		armStatus: {
			{CPU: map[string]float64{"kube-scheduler": 1}, Traffic: map[string]float64{"writes": 2}},
		},
	}
	rep := budgetReportOf(500, 50, rounds)
	s := rep.Arms[armSlice]
	if s.Rounds != 3 || s.CPU["kube-scheduler"] != 2 || s.CPU["extender"] != 2 || s.Traffic["writes"] != 2 || s.Traffic["writes PUT/resourceslices"] != 1 || s.SliceWrites != 1 {
		t.Errorf("slice arm %+v", s)
	}
	rows := budgetRows(rep)
	if len(rows) != 2 || !strings.Contains(rows[0].Measure, "ResourceSlice update") || !strings.Contains(rows[1].Measure, "Node status patch") {
		t.Fatalf("rows %+v", rows)
	}
	if !strings.Contains(rows[0].Figure, "the publisher's slice writes 1.00") || strings.Contains(rows[1].Figure, "slice writes") {
		t.Errorf("figures %q / %q", rows[0].Figure, rows[1].Figure)
	}
	if rows[0].Spread != "medians of 3 rounds of 50 changes" {
		t.Errorf("spread %q", rows[0].Spread)
	}
}
