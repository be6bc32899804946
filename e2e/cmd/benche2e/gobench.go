package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// goBench is --scenario gobench: it reads `go test -bench` output on stdin
// and prints it as rows of BENCHMARKS.md's table, one per benchmark, with
// command as the command column (make bench passes its own).
func goBench(command string) error {
	run := runInfo{
		Command: command,
		Start:   time.Now(),
		Commit:  gitCommit(),
		// The load average now says nothing about the benchmarks that ran
		// before: the machine column gives none.
		Machine: machineLabel(runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), ""),
	}
	rows, err := goBenchRows(os.Stdin, runtime.GOMAXPROCS(0))
	if err != nil {
		return fmt.Errorf("reading go test -bench output: %w", err)
	}
	printRows(rows, run)
	return nil
}

// goBenchRows turns `go test -bench` output into rows: the measure is the
// package (below the module) and the benchmark's name without the -procs
// suffix go test adds, the figure its time per op and the other values as
// printed. Other lines are skipped.
func goBenchRows(r io.Reader, procs int) ([]row, error) {
	const module = "github.com/capscale/capscale/"
	var rows []row
	pkg := ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimSpace(p), module)
			continue
		}
		f := strings.Fields(line)
		// Name, iterations, then value-unit pairs.
		if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := strings.TrimSuffix(f[0], "-"+strconv.Itoa(procs))
		var figures []string
		for i := 2; i < len(f); i += 2 {
			v, unit := f[i], f[i+1]
			if unit == "ns/op" {
				if ns, err := strconv.ParseFloat(v, 64); err == nil {
					figures = append(figures, perOp(ns))
					continue
				}
			}
			figures = append(figures, v+" "+unit)
		}
		measure := name
		if pkg != "" {
			measure = pkg + " " + name
		}
		rows = append(rows, row{Measure: measure, Figure: strings.Join(figures, ", ")})
	}
	return rows, sc.Err()
}

// perOp prints nanoseconds per operation in the unit the page uses.
func perOp(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3g s/op", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3g ms/op", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3g µs/op", ns/1e3)
	}
	return fmt.Sprintf("%.3g ns/op", ns)
}
