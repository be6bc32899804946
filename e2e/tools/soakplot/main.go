// Command soakplot draws the charts of a soak run (make bench-e2e
// --scenario soak) from its CSVs: rss.png (each capscale process's
// resident memory), drift.png (nodes where capscale's view differed from
// the apiserver's, and Pending underlay pods) and pods.png (binds a
// second). It is its own module so that gonum/plot stays out of
// capscale's.
//
//	go run . RUN_DIR...
package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: soakplot RUN_DIR...")
		os.Exit(2)
	}
	for _, dir := range os.Args[1:] {
		if err := draw(dir); err != nil {
			fmt.Fprintf(os.Stderr, "soakplot %s: %v\n", dir, err)
			os.Exit(1)
		}
	}
}

func readCSV(path string) ([]map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	var out []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			if i < len(r) {
				m[h] = r[i]
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func num(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

func draw(dir string) error {
	samples, err := readCSV(filepath.Join(dir, "samples.csv"))
	if err != nil {
		return err
	}
	procs, err := readCSV(filepath.Join(dir, "processes.csv"))
	if err != nil {
		return err
	}
	series := map[string]plotter.XYs{}
	for _, r := range procs {
		series[r["process"]] = append(series[r["process"]], plotter.XY{X: num(r["seconds"]) / 60, Y: num(r["rss_mb"])})
	}
	var names []string
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	var lines []any
	for _, n := range names {
		lines = append(lines, n, series[n])
	}
	if err := chart(filepath.Join(dir, "rss.png"), "Resident memory of capscale's processes", "MiB", lines...); err != nil {
		return err
	}
	var drift, pending, binds plotter.XYs
	for _, r := range samples {
		x := num(r["seconds"]) / 60
		drift = append(drift, plotter.XY{X: x, Y: num(r["drift_nodes"])})
		pending = append(pending, plotter.XY{X: x, Y: num(r["pending"])})
		binds = append(binds, plotter.XY{X: x, Y: num(r["binds_per_s"])})
	}
	if err := chart(filepath.Join(dir, "drift.png"), "Nodes where capscale's view differs from the apiserver's", "nodes",
		"drift (nodes)", drift, "Pending underlay pods", pending); err != nil {
		return err
	}
	return chart(filepath.Join(dir, "pods.png"), "Pods bound per second", "pods/s", "binds/s", binds)
}

func chart(path, title, ylabel string, lines ...any) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "minutes"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	if err := plotutil.AddLines(p, lines...); err != nil {
		return err
	}
	p.Legend.Top = true
	p.BackgroundColor = color.White
	return p.Save(10*vg.Inch, 4*vg.Inch, path)
}
