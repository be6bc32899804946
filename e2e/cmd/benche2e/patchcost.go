package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// patchForm is one way to send the mirror's Node patch: the same change
// (one annotation), a different request.
type patchForm struct {
	name       string
	pt         types.PatchType
	validation string // PatchOptions.FieldValidation; "" is the server's default (Warn)
}

var patchForms = []patchForm{
	{"JSON merge patch", types.MergePatchType, ""},
	{"JSON merge patch, fieldValidation Ignore", types.MergePatchType, metav1.FieldValidationIgnore},
	{"strategic merge patch", types.StrategicMergePatchType, ""},
	{"strategic merge patch, fieldValidation Ignore", types.StrategicMergePatchType, metav1.FieldValidationIgnore},
}

// nodePatchCost measures what the plane spends on one of the mirror's Node
// patches in each form: a plane of nodes kwok nodes with capscale-scheduler
// and capscale-controller's RBAC and node-writes policy, capscale-controller
// itself stopped; rounds rounds of each form, the forms' order turned from
// round to round, each round rate patches a second for length, sent as
// capscale-controller's ServiceAccount. Each process's CPU less its idle
// rate, per patch.
func nodePatchCost(ctx context.Context, nodes, rate, rounds int, length time.Duration, binDir string, nodeLease time.Duration) error {
	if nodes < 1 || rate < 1 || rounds < 1 || length < time.Second {
		return fmt.Errorf("node-patch: want nodes, a rate and rounds of at least 1 and a round of a second, got %d nodes, %d/s, %d rounds of %s", nodes, rate, rounds, length)
	}
	run := thisRun(time.Now(), loadAverage())
	s, err := stack.Start(ctx, stack.Options{
		BinDir: binDir,
		Plane: plane.Options{BinDir: binDir, Nodes: nodes, NodeLeaseDuration: nodeLease,
			Logf: func(f string, a ...any) { fmt.Printf("# "+f+"\n", a...) }},
		Plugin:          true,
		CapacitySources: ciliumSources,
		ControllerArgs:  []string{"--leader-elect=false"},
		Prepare:         prepareCilium(0),
	})
	if err != nil {
		return err
	}
	defer s.Stop()
	// The bench writes the mirror's annotation; the mirror would undo it.
	s.Controller.Stop(30 * time.Second)
	p, err := newNodePatcher(ctx, s)
	if err != nil {
		return err
	}
	pids := livePids(s.Plane)
	time.Sleep(10 * time.Second) // the controller's last patches settle
	from := allCPU(s.Plane)
	t := time.Now()
	time.Sleep(length)
	idle := idleRates(from, allCPU(s.Plane), time.Since(t))

	apiserver := map[string][]float64{}
	all := map[string][]float64{} // every plane process
	seq := 0
	for r := range rounds {
		forms := slices.Concat(patchForms[r%len(patchForms):], patchForms[:r%len(patchForms)])
		for _, f := range forms {
			if _, _, err := waitQuiet(ctx, pids, idle, 2*time.Minute); err != nil {
				return err
			}
			n := int(length.Seconds() * float64(rate))
			before, start := allCPU(s.Plane), time.Now()
			if err := sendPatches(ctx, p, f, nodes, n, rate, seq); err != nil {
				return err
			}
			seq += n
			ms := cpuMsPerPod(before, allCPU(s.Plane), time.Since(start), idle, n)
			apiserver[f.name] = append(apiserver[f.name], ms["kube-apiserver"]*1000)
			all[f.name] = append(all[f.name], total(ms)*1000)
			fmt.Printf("round %d, %s: %d patches at %.1f/s; per patch, above idle: %s\n", r, f.name, n, float64(n)/time.Since(start).Seconds(), perChange(ms, 1))
		}
	}
	var rows []row
	base := apiserver[patchForms[0].name]
	for _, f := range patchForms {
		a := apiserver[f.name]
		ratios := make([]float64, len(a))
		for i := range a {
			ratios[i] = a[i] / max(base[i], 1)
		}
		against := ""
		if f != patchForms[0] {
			against = fmt.Sprintf("; against the %s of the same round %.2f–%.2f", patchForms[0].name, slices.Min(ratios), slices.Max(ratios))
		}
		rows = append(rows, row{
			Measure: fmt.Sprintf("The mirror's Node patch as a %s, %d nodes, %d a second: kube-apiserver CPU per patch above its idle rate (median of %d rounds)", f.name, nodes, rate, rounds),
			Figure:  fmt.Sprintf("%.0f µs", quantileOf(a, 0.5)),
			Spread: fmt.Sprintf("rounds %.0f–%.0f µs%s; the plane's processes %.0f µs (median)",
				slices.Min(a), slices.Max(a), against, quantileOf(all[f.name], 0.5)),
		})
	}
	printRows(rows, run)
	return nil
}

// sendPatches sends n patches of form f at rate a second, node k%nodes
// getting the value seq+k, at most 64 in flight.
func sendPatches(ctx context.Context, p *nodePatcher, f patchForm, nodes, n, rate, seq int) error {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		slots    = make(chan struct{}, 64)
	)
	for k := range n {
		<-tick.C
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			err := p.send(ctx, plane.NodeName(k%nodes), fmt.Sprint(seq+k), f)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}
