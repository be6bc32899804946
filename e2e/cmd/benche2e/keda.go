package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// KEDA at scale (issue 27): N ScaledObjects on capscale's external scaler
// through KEDA's real operator and metrics server, beside N plain HPAs on
// capscale's own APIService, one load source for all.
//
// Both sides run on one plane, one adapter process and the same N
// Deployments, one after the other: the APIService side first, on a plane
// KEDA has not touched (once started, KEDA's operator and CRDs stay); then
// its HPAs are deleted, the Deployments put back at one replica, KEDA
// started (it takes the APIService over, capscale serving only the scaler,
// as where KEDA must keep it) and the ScaledObjects created. Separate
// planes would differ by more than the path: their start-up, their etcd.
//
// Each side: idle CPU first, then its objects, until every HPA reads a
// value; a steady window with the load unchanged, over which latency at
// capscale (GetMetrics, or external-metrics LIST), the HPA controller's own
// read time and each process's CPU above idle per call are read; then
// rounds of load changes that move every HPA's desired replicas (1 ⇄ 2),
// each HPA timed from the change to its status showing the new value.

// checkKEDABins fails before the plane starts if a binary is missing.
func checkKEDABins(binDir string, sides []string) error {
	bins := []string{"metrics-adapter"}
	for _, s := range sides {
		if s == sideKEDA {
			bins = append(bins, "keda-operator", "keda-adapter")
		}
	}
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Errorf("%s is missing from %s (make build; make keda for KEDA's): %w", b, binDir, err)
		}
	}
	return nil
}

func kedaBench(ctx context.Context, o kedaOptions) error {
	run := thisRun(time.Now(), loadAverage())
	// Generous: at most 15 minutes to steady and 10 a round per side.
	limit := 20*time.Minute + time.Duration(len(o.Sides))*(15*time.Minute+o.Steady+time.Duration(o.Rounds)*10*time.Minute)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	r, err := startKEDARig(ctx, o)
	if err != nil {
		return err
	}
	defer r.stop()
	if r.kcmURL == "" {
		fmt.Println("# kube-controller-manager's port not found: the HPA's own read times are left out")
	}
	var sides []kedaSide
	for i, name := range o.Sides {
		var ks kedaSide
		if name == sideAPIService {
			ks, err = r.runAPIServiceSide(ctx)
		} else {
			ks, err = r.runKEDASide(ctx)
		}
		if err != nil {
			return err
		}
		sides = append(sides, ks)
		if i+1 < len(o.Sides) {
			if err := r.reset(ctx); err != nil {
				return err
			}
		}
	}
	printKEDA(o, sides)
	printRows(kedaRows(o.ScaledObjects, o.Polling, sides), run)
	return nil
}

// printKEDA is the human table: the steady window, then the rounds.
func printKEDA(o kedaOptions, sides []kedaSide) {
	fmt.Printf("# %d HPAs a side, HPA sync %s, KEDA pollingInterval %s, steady window %s, %d rounds\n",
		o.ScaledObjects, hpaSync, o.Polling, o.Steady, o.Rounds)
	fmt.Printf("side\tcalls at capscale\tper s\tp50\tp99\tHPA reads\tHPA read p50\tHPA read p99\n")
	for _, s := range sides {
		fmt.Printf("%s\t%.0f\t%.1f\t%s\t%s\t%.0f\t%s\t%s\n", s.Name, s.Calls, s.Calls/s.Window.Seconds(),
			s.P50, s.P99, s.HPAReads, s.HPAP50, s.HPAP99)
	}
	fmt.Printf("side\tCPU µs above idle per call (capscale and keda-operator: per call at capscale; the others: per HPA read)\n")
	for _, s := range sides {
		fmt.Printf("%s\t%s\n", s.Name, formatMap(s.CPU, 1000))
		if len(s.Others) > 0 {
			fmt.Printf("%s\tthe scaler's other calls in the window: %s\n", s.Name, formatMap(s.Others, 1))
		}
	}
	fmt.Printf("side\tround\tload\treplicas\tHPAs\tp50 s\tp99 s\tmax s\n")
	for _, s := range sides {
		for i, st := range s.Rounds {
			fmt.Printf("%s\t%d\t%.1f\t%d\t%d\t%.2f\t%.2f\t%.2f\n", s.Name, i, st.Load, st.Want, st.N, st.P50.Seconds(), st.P99.Seconds(), st.Max.Seconds())
		}
		fmt.Printf("%s\tall\t\t\t%d\t%.2f\t%.2f\t%.2f\n", s.Name, s.All.N, s.All.P50.Seconds(), s.All.P99.Seconds(), s.All.Max.Seconds())
	}
}
