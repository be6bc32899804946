package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/capscale/capscale/e2e/soak"
)

// soakRun is the soak scenario (issue 30): for each mode, one plane of
// nodes kwok nodes under churn and faults for d, checked every second.
// It prints each run's summary and the rows for BENCHMARKS.md's table;
// the CSVs are under out/<mode>-<nodes>/, charted by e2e/tools/soakplot.
func soakRun(ctx context.Context, modes string, nodes int, d time.Duration, rate float64, out, binDir string, nodeLease time.Duration) error {
	run := thisRun(time.Now(), loadAverage())
	var rows []row
	for _, mode := range strings.Split(modes, ",") {
		switch mode {
		case "extender", "native", "plugin":
		default:
			return fmt.Errorf("--soak-modes: %q is not extender, native or plugin", mode)
		}
		dir := filepath.Join(out, fmt.Sprintf("%s-%d", mode, nodes))
		ctx, cancel := context.WithTimeout(ctx, d+45*time.Minute) // a large cluster fills first
		r, err := soak.Run(ctx, soak.Options{Mode: mode, Nodes: nodes, Duration: d, Rate: rate, BinDir: binDir, OutDir: dir,
			NodeLease: nodeLease, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
		cancel()
		if err != nil {
			return fmt.Errorf("soak %s: %w", mode, err)
		}
		fmt.Print(r.Summary())
		fmt.Printf("  samples: %s\n", dir)
		rows = append(rows, soakRows(r)...)
	}
	printRows(rows, run)
	return nil
}

// soakRows: one row for the invariants of a run, one for its growth.
func soakRows(r *soak.Result) []row {
	o := r.Options
	broken := 0
	for _, n := range r.Counts {
		broken += n
	}
	applied, all := len(soak.Applicable(o.Mode)), len(soak.Invariants)
	verdict := fmt.Sprintf("all %d invariants held over %d samples", all, r.Samples)
	if applied < all {
		verdict = fmt.Sprintf("%d of %d invariants held over %d samples (the others apply to another mode)", applied, all, r.Samples)
	}
	if broken > 0 {
		verdict = fmt.Sprintf("%d violations over %d samples (see the run's violations.txt)", broken, r.Samples)
	}
	var growth []string
	for name, g := range r.Growth {
		if strings.HasSuffix(name, " rss") {
			growth = append(growth, fmt.Sprintf("%s %+.1f MiB/h [%+.1f, %+.1f]", strings.TrimSuffix(name, " rss"), g.PerHour/(1<<20), g.Lo/(1<<20), g.Hi/(1<<20)))
		}
	}
	return []row{
		{Measure: fmt.Sprintf("soak, %s mode, %d nodes, %s: invariants", o.Mode, o.Nodes, o.Duration), Figure: verdict, Goal: "0 violations"},
		{Measure: fmt.Sprintf("soak, %s mode, %d nodes, %s: RSS slope, second half", o.Mode, o.Nodes, o.Duration), Figure: strings.Join(growth, "; "), Goal: "flat within noise"},
	}
}
