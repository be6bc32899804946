package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// tableHeader is the header of BENCHMARKS.md's "Current figures" tables,
// whose rows tableRow writes (TestTableHeaderIsBenchmarks keeps the two
// the same).
const tableHeader = "| measure | figure | spread | goal | command | date | commit | Kubernetes | machine |"

// row is one measure of BENCHMARKS.md's top table; the command, date,
// commit, Kubernetes and machine columns are the run's and come from
// runInfo.
type row struct {
	Measure, Figure, Spread, Goal string
}

// runInfo is what every row of one run shares.
type runInfo struct {
	Command string
	Start   time.Time
	// Commit is the checkout's (git describe's short hash, -dirty with
	// uncommitted changes); Kubernetes the plane's version. Empty: "—".
	Commit, Kubernetes string
	Machine            string
}

// tableRow formats r as a row of BENCHMARKS.md's top table (tableHeader).
func tableRow(r row, run runInfo) string {
	dash := func(s string) string {
		if s == "" {
			return "—"
		}
		return s
	}
	cells := []string{r.Measure, r.Figure, dash(r.Spread), dash(r.Goal), "`" + run.Command + "`",
		run.Start.UTC().Format("2006-01-02 15:04"), dash(run.Commit), dash(run.Kubernetes), run.Machine}
	for i, c := range cells {
		// A pipe would end the cell; in a code span too, GitHub needs it escaped.
		cells[i] = strings.ReplaceAll(c, "|", `\|`)
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

// machineLabel is the table's machine column: cores, platform, toolchain and
// the 1-minute load average at the start, since timings swing with it.
func machineLabel(cores int, goos, goarch, goVersion, loadavg string) string {
	s := fmt.Sprintf("%d cores, %s/%s, %s", cores, goos, goarch, goVersion)
	if f := strings.Fields(loadavg); len(f) > 0 && f[0] != "unknown" {
		s += ", load " + f[0]
	}
	return s
}

// commandLine is the command column: how this run was started, without
// --bin-dir, which says where the binaries are, not what was measured.
func commandLine(args []string) string {
	parts := []string{"go run ./e2e/cmd/benche2e"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--bin-dir" || a == "-bin-dir":
			i++ // and its value
		case strings.HasPrefix(a, "--bin-dir=") || strings.HasPrefix(a, "-bin-dir="):
		default:
			parts = append(parts, a)
		}
	}
	return strings.Join(parts, " ")
}

// planeVersion is the Kubernetes version of the planes this run starts
// (main reads it from --bin-dir's kube-apiserver); empty for none.
var planeVersion string

// thisRun describes the running process, started at start with the load
// average loadavg (/proc/loadavg's fields).
func thisRun(start time.Time, loadavg string) runInfo {
	return runInfo{
		Command:    commandLine(os.Args[1:]),
		Start:      start,
		Commit:     gitCommit(),
		Kubernetes: planeVersion,
		Machine:    machineLabel(runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), loadavg),
	}
}

// gitCommit is the checkout's short commit, -dirty if anything tracked is
// changed; empty outside a git checkout.
func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=7").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// kubeVersion is what `kube-apiserver --version` in binDir says
// ("Kubernetes v1.37.2" → "v1.37.2"), or empty.
func kubeVersion(binDir string) string {
	out, err := exec.Command(filepath.Join(binDir, "kube-apiserver"), "--version").Output()
	if err != nil {
		return ""
	}
	v, _ := strings.CutPrefix(strings.TrimSpace(string(out)), "Kubernetes ")
	return v
}

// printRows ends a scenario's report with its rows, ready to replace the
// ones in BENCHMARKS.md's table.
func printRows(rows []row, run runInfo) {
	fmt.Println("# rows for BENCHMARKS.md's tables (" + tableHeader + "):")
	for _, r := range rows {
		fmt.Println(tableRow(r, run))
	}
}

// ms2 prints a median with its interval as the page does: 1.71 [1.54–1.82].
func ms2(i interval) string {
	if math.IsNaN(i.Median) {
		return "n/a"
	}
	s := fmt.Sprintf("%.2f [%.2f–%.2f]", i.Median, i.Lo, i.Hi)
	if i.Coverage < 0.95 {
		s += fmt.Sprintf(" (covers %.0f%%)", 100*i.Coverage)
	}
	return s
}

// throughputRows are the scheduling rig's rows: the rate of side a against
// side b, and the CPU per pod that rate cost.
func throughputRows(rep rigReport, a, b string) []row {
	what := fmt.Sprintf("%s / %s, %d nodes", a, b, rep.Nodes)
	switch {
	case rep.ExtenderFloor != "":
		what += ", null extender (" + rep.ExtenderFloor + ")"
	case rep.ExtenderHTTPS:
		what += ", extender over HTTPS"
	}
	rateGoal, cpuGoal := "", ""
	switch {
	case rep.ExtenderFloor != "":
		// The floor is a reference, not capscale: no goal applies.
	case rep.Scenario == "extender":
		rateGoal, cpuGoal = "≥ 0.8 (issue 17)", "extender < 0.8 ms (issue 17)"
	case rep.Scenario == "native" || rep.Scenario == "native-prioritize":
		rateGoal = "≥ 0.95 (issue 11)"
	case rep.Scenario == "plugin":
		rateGoal, cpuGoal = "≥ 0.98 (issue 26)", "within 5% (issue 26)"
	case draMode(rep.Scenario):
		rateGoal = "≥ 0.95 (issue 56): " + verdict(rep.PairedRateCI95, 0.95, true)
		cpuGoal = "kube-scheduler within 10% (issue 56): " + verdict(rep.PairedSchedCPUCI95, 1.10, false)
	case rep.Scenario == "plugin-memo":
		cpuGoal = "lower by more than the rounds' spread, or the memo goes (issue 41)"
	case rep.Scenario == "plugin-floor" || rep.Scenario == "plugin-null":
		rateGoal, cpuGoal = "— (the floor under issue 26's goal)", "— (the floor under issue 26's goal)"
	case rep.Scenario == "tax":
		rateGoal, cpuGoal = "within 5% of the default", "within 5% of the default"
	case rep.Scenario == "plugin-tax":
		rateGoal, cpuGoal = "within 2% of stock kube-scheduler (issue 26)", "within 2% of stock kube-scheduler (issue 26)"
	}
	sa, sb := rep.Sides[a], rep.Sides[b]
	rate := row{
		Measure: "Scheduling rate, " + what,
		Figure: fmt.Sprintf("median paired ratio %s; ratio of medians %.2f (paired rounds %.2f–%.2f); %.1f (%.1f–%.1f) against %.1f (%.1f–%.1f) pods/s, %d rounds",
			rep.PairedRateCI95, rep.RatioOfMedians, rep.PairedRatioMin, rep.PairedRatioMax,
			sa.MedianPodsPerS, sa.MinPodsPerS, sa.MaxPodsPerS, sb.MedianPodsPerS, sb.MinPodsPerS, sb.MaxPodsPerS, len(sa.RoundsPodsPerS)),
		Goal: rateGoal,
	}
	figure := fmt.Sprintf("all processes %.2f / %.2f (median paired ratio %s); kube-scheduler %s / %s",
		sa.CPUMsPerPodTotal, sb.CPUMsPerPodTotal, rep.PairedCPUCI95,
		ms2(sa.CPUMsPerPodCI95["kube-scheduler"]), ms2(sb.CPUMsPerPodCI95["kube-scheduler"]))
	if pluginMode(rep.Scenario) || draMode(rep.Scenario) {
		// The plugin's cost, or DRA's, is in kube-scheduler's CPU.
		figure += fmt.Sprintf(" (median paired ratio %s)", rep.PairedSchedCPUCI95)
	}
	if !pluginMode(rep.Scenario) {
		figure += fmt.Sprintf("; extender %s / %s", ms2(sa.CPUMsPerPodCI95["extender"]), ms2(sb.CPUMsPerPodCI95["extender"]))
	}
	cpu := row{Measure: "CPU ms per pod, " + what, Figure: figure, Goal: cpuGoal}
	if !draMode(rep.Scenario) {
		return []row{rate, cpu}
	}
	// DRA mode makes a ResourceClaim per pod: what the apiserver writes
	// and sends for it.
	api := row{
		Measure: "API traffic per pod, " + what,
		Figure:  fmt.Sprintf("%s: %s. %s: %s", a, trafficFigure(sa.TrafficPerPod), b, trafficFigure(sb.TrafficPerPod)),
		Spread:  "medians of the rounds, the idle plane's rate taken off",
	}
	return []row{rate, cpu, api}
}

// verdict says whether a median paired ratio's interval meets a goal of
// bound: at least bound (atLeast) or at most it. Met or not met only when
// the whole interval is on one side; otherwise the rounds cannot tell.
func verdict(ci interval, bound float64, atLeast bool) string {
	if math.IsNaN(ci.Median) {
		return "no rounds"
	}
	meets := func(x float64) bool {
		if atLeast {
			return x >= bound
		}
		return x <= bound
	}
	switch {
	case meets(ci.Lo) && meets(ci.Hi):
		return "met"
	case !meets(ci.Lo) && !meets(ci.Hi):
		return "not met"
	case meets(ci.Median):
		return "met on the median; the interval straddles it"
	}
	return "not met on the median; the interval straddles it"
}

// reactionRows is the reaction scenario's row; seconds is sorted.
func reactionRows(seconds []float64) []row {
	n := len(seconds)
	if n == 0 {
		return nil
	}
	return []row{{
		Measure: "Reaction: load change → replicas changed",
		Figure:  fmt.Sprintf("max %.2f s, median %.2f s, min %.2f s (%d changes)", seconds[n-1], seconds[n/2], seconds[0], n),
		Goal:    "max ≤ 21 s (issue 7)",
	}}
}

// memoryRows are the memory scenario's rows, from rss's strings after the
// pods were created and after the adapters' restart; baseline is empty
// without --baseline-adapter.
func memoryRows(nodes, pods int, extender, adapter, adapterRestarted, baseline string) []row {
	size := fmt.Sprintf("%d nodes, %d pods", nodes, pods)
	rows := []row{
		{Measure: "Extender memory, " + size, Figure: extender, Goal: "< 150 MiB (issue 7)"},
		{Measure: "Adapter memory, " + size, Figure: adapter + "; restarted: " + adapterRestarted, Goal: "< 150 MiB (issue 18)"},
	}
	if baseline != "" {
		rows = append(rows, row{Measure: "Baseline adapter memory, " + size, Figure: baseline})
	}
	return rows
}

// pathFigures are one path's figures of the metrics scenario, capscale's
// adapter against the floor, in milliseconds and requests per second.
type pathFigures struct {
	Path                string
	OursP50, OursP99    float64
	FloorP50, FloorP99  float64
	OursRate, FloorRate float64
}

// metricsRows are the metrics scenario's rows, one per path; rate 0 is the
// closed loop of clients.
func metricsRows(rate, clients int, paths []pathFigures) []row {
	loop := fmt.Sprintf("closed loop, %d clients", clients)
	if rate > 0 {
		loop = fmt.Sprintf("open loop %d req/s", rate)
	}
	var rows []row
	for _, p := range paths {
		goal := "latency ratio ≤ 1.2 (issue 7)"
		if p.Path == "direct" {
			goal = "latency ratio ≤ 1.2, direct p99 < 5 ms (issue 7)"
		}
		rows = append(rows, row{
			Measure: fmt.Sprintf("External-metrics GET, capscale / floor, %s, %s", p.Path, loop),
			Figure: fmt.Sprintf("p50 %.2f, p99 %.2f (capscale p50 %.2f ms, p99 %.2f ms); throughput %.2f (%.0f against %.0f req/s)",
				p.OursP50/p.FloorP50, p.OursP99/p.FloorP99, p.OursP50, p.OursP99, p.OursRate/p.FloorRate, p.OursRate, p.FloorRate),
			Goal: goal,
		})
	}
	return rows
}

// delegateRows is the delegate scenario's row, in milliseconds.
func delegateRows(directP50, directP99, forwardedP50, forwardedP99 float64) []row {
	return []row{{
		Measure: "Forwarding to a delegate, p50 overhead",
		Figure: fmt.Sprintf("%.3f ms (p50 %.3f against %.3f ms direct; p99 %.3f against %.3f)",
			forwardedP50-directP50, forwardedP50, directP50, forwardedP99, directP99),
		Goal: "≤ 1 ms (issue 10)",
	}}
}

// kedaGoal is issue 27's bar for the path through KEDA.
const kedaGoal = "p99 well under KEDA users' ~5 s at 300 ScaledObjects (keda#5624)"

// kedaRows are the keda scenario's rows: one per side's steady window, and
// the reaction of every side run side by side.
func kedaRows(n int, polling time.Duration, sides []kedaSide) []row {
	var reaction []string
	var out []row
	for _, s := range sides {
		rate := 0.0
		if s.Window > 0 {
			rate = s.Calls / s.Window.Seconds()
		}
		hpa := fmt.Sprintf("the HPA controller's read p50 %s, p99 %s", s.HPAP50, s.HPAP99)
		switch s.Name {
		case sideKEDA:
			out = append(out, row{
				Measure: fmt.Sprintf("KEDA external scaler, %d ScaledObjects through keda-operator (pollingInterval %s)", n, polling),
				Figure: fmt.Sprintf("GetMetrics at capscale p50 %s, p99 %s (%.0f calls, %.1f/s); CPU per GetMetrics: capscale %s, keda-operator %s; %s",
					s.P50, s.P99, s.Calls, rate, cpuFigure(s.CPU, procAdapter), cpuFigure(s.CPU, procKEDAOperator), hpa),
				Goal: kedaGoal,
			})
			reaction = append(reaction, "KEDA "+reactionFigure(s.All))
		case sideAPIService:
			out = append(out, row{
				Measure: fmt.Sprintf("capscale's APIService, %d HPAs on the same source", n),
				Figure: fmt.Sprintf("external-metrics LIST at capscale p50 %s, p99 %s (%.0f calls, %.1f/s); CPU per LIST: capscale %s; %s",
					s.P50, s.P99, s.Calls, rate, cpuFigure(s.CPU, procAdapter), hpa),
			})
			reaction = append(reaction, "APIService "+reactionFigure(s.All))
		}
	}
	if len(reaction) > 0 {
		rounds := 0
		if len(sides) > 0 {
			rounds = len(sides[0].Rounds)
		}
		out = append(out, row{
			Measure: fmt.Sprintf("Load change → HPA desired replicas, %d HPAs, %s HPA sync", n, hpaSync),
			Figure:  fmt.Sprintf("%s (%d rounds × %d HPAs a side)", strings.Join(reaction, "; "), rounds, n),
		})
	}
	return out
}

// cpuFigure is one process's CPU per call, or n/a without calls to charge.
func cpuFigure(m map[string]float64, name string) string {
	v, ok := m[name]
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.3f ms", v)
}

func reactionFigure(r roundStats) string {
	return fmt.Sprintf("p50 %.2f s, p99 %.2f s, max %.2f s", r.P50.Seconds(), r.P99.Seconds(), r.Max.Seconds())
}
