package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capscale/capscale/e2e/stack"
)

// idleWindow is how long each side's idle CPU rate is read for, before its
// HPAs or ScaledObjects exist.
const idleWindow = 10 * time.Second

// runAPIServiceSide: N HPAs on capscale's external metric through the
// aggregator, capscale's adapter owning the APIService (as stack.Start left
// it).
func (r *kedaRig) runAPIServiceSide(ctx context.Context) (kedaSide, error) {
	return r.measureSide(ctx, sideAPIService, r.pids(), func(ctx context.Context, i int) error {
		_, err := r.cs.AutoscalingV2().HorizontalPodAutoscalers(kedaNS).Create(ctx, benchHPA(i), metav1.CreateOptions{})
		return err
	})
}

// runKEDASide starts KEDA's operator and metrics server, which take the
// APIService over (capscale serves only the scaler, as where KEDA must keep
// it), then N ScaledObjects on capscale's scaler.
func (r *kedaRig) runKEDASide(ctx context.Context) (kedaSide, error) {
	var err error
	if r.k, err = r.s.StartKEDA(ctx, r.o.BinDir, stack.KEDAOptions{}); err != nil {
		return kedaSide{}, fmt.Errorf("starting KEDA: %w", err)
	}
	if err := r.scalerAuth(ctx); err != nil {
		return kedaSide{}, err
	}
	return r.measureSide(ctx, sideKEDA, r.pids(), func(ctx context.Context, i int) error {
		so := benchScaledObject(i, r.scalerAddr, r.o.Polling)
		_, err := r.dyn.Resource(scaledObjectsGVR).Namespace(kedaNS).Create(ctx, so, metav1.CreateOptions{})
		return err
	})
}

// pids are the processes whose CPU is charged to the calls: capscale's
// adapter, KEDA's two if running, and the plane's apiserver and HPA
// controller, which both sides load alike.
func (r *kedaRig) pids() map[string]int {
	live := livePids(r.s.Plane)
	out := map[string]int{procAdapter: r.s.Adapter.Pid()}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager"} {
		if pid, ok := live[name]; ok {
			out[name] = pid
		}
	}
	if r.k != nil {
		out[procKEDAOperator], out[procKEDAAdapter] = r.k.Operator.Pid(), r.k.Adapter.Pid()
	}
	return out
}

// sampleNamed reads the CPU time of each named process.
func sampleNamed(pids map[string]int) (cpuTimes, error) {
	out := cpuTimes{}
	for name, pid := range pids {
		d, err := procCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = d
	}
	return out, nil
}

// measureSide reads the idle CPU, creates the side's N objects, waits for
// every HPA to read a value, reads the steady window, then times the
// rounds of load changes.
func (r *kedaRig) measureSide(ctx context.Context, name string, pids map[string]int, create func(context.Context, int) error) (kedaSide, error) {
	n := r.o.ScaledObjects
	// The plane finishes with what came before (pods, KEDA's start).
	if err := sleep(ctx, idleWindow); err != nil {
		return kedaSide{}, err
	}
	a, err := sampleNamed(pids)
	if err != nil {
		return kedaSide{}, err
	}
	t0 := time.Now()
	if err := sleep(ctx, idleWindow); err != nil {
		return kedaSide{}, err
	}
	b, err := sampleNamed(pids)
	if err != nil {
		return kedaSide{}, err
	}
	idle := idleRates(a, b, time.Since(t0))

	fmt.Printf("# %s: creating %d objects\n", name, n)
	start := time.Now()
	if err := forEach(ctx, n, 8, nil, create); err != nil {
		return kedaSide{}, fmt.Errorf("%s: creating objects: %w", name, err)
	}
	if err := r.watch.waitSteady(ctx, n, 1, 15*time.Minute); err != nil {
		return kedaSide{}, fmt.Errorf("%s: %w", name, err)
	}
	fmt.Printf("# %s: every HPA reads a value %.0fs after the first object\n", name, time.Since(start).Seconds())
	// One more sync, so that creation's tail is not in the window.
	if err := sleep(ctx, hpaSync); err != nil {
		return kedaSide{}, err
	}
	before, err := r.scrape(ctx, pids)
	if err != nil {
		return kedaSide{}, err
	}
	if err := sleep(ctx, r.o.Steady); err != nil {
		return kedaSide{}, err
	}
	after, err := r.scrape(ctx, pids)
	if err != nil {
		return kedaSide{}, err
	}
	ks := steadyFigures(name, before, after, idle)
	var all []time.Duration
	for round := range r.o.Rounds {
		load, want := loadHigh, int32(2)
		if round%2 == 1 {
			load, want = loadLow, 1
		}
		// A random wait, so changes land anywhere in the HPA's cycle.
		if err := sleep(ctx, time.Duration(rand.Int64N(int64(hpaSync)))); err != nil {
			return ks, err
		}
		r.watch.arm(want)
		r.src.Set(load)
		times, err := r.watch.waitReached(ctx, n, 10*time.Minute)
		if err != nil {
			return ks, fmt.Errorf("%s round %d: %w", name, round, err)
		}
		st := statsOf(load, want, times)
		ks.Rounds = append(ks.Rounds, st)
		all = append(all, times...)
		fmt.Printf("# %s round %d: load %.1f → %d replicas: p50 %.2f s, p99 %.2f s, max %.2f s\n",
			name, round, load, want, st.P50.Seconds(), st.P99.Seconds(), st.Max.Seconds())
		// The scale lands (pods created, the HPAs see them) before the next.
		if err := r.watch.waitSteady(ctx, n, want, 10*time.Minute); err != nil {
			return ks, fmt.Errorf("%s round %d: %w", name, round, err)
		}
	}
	ks.All = statsOf(0, 0, all)
	return ks, nil
}

// scrape reads capscale's adapter, kube-controller-manager (if it answers:
// only the HPA-side figures need it) and the processes' CPU.
func (r *kedaRig) scrape(ctx context.Context, pids map[string]int) (kedaScrape, error) {
	var sc kedaScrape
	var err error
	if sc.Adapter, err = scrapeHTTP(ctx, r.adminHTTP, r.s.AdapterURL+"/metrics"); err != nil {
		return sc, fmt.Errorf("capscale adapter metrics: %w", err)
	}
	if r.kcmURL != "" {
		if sc.KCM, err = scrapeHTTP(ctx, r.adminHTTP, r.kcmURL); err != nil {
			fmt.Printf("# kube-controller-manager's /metrics: %v (the HPA's own read times are left out)\n", err)
			sc.KCM = nil
		}
	}
	sc.CPU, err = sampleNamed(pids)
	sc.At = time.Now()
	return sc, err
}

// reset removes the APIService side's HPAs and puts every Deployment back
// at one replica, so the KEDA side starts where this one did.
func (r *kedaRig) reset(ctx context.Context) error {
	r.src.Set(loadLow)
	if err := r.cs.AutoscalingV2().HorizontalPodAutoscalers(kedaNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("deleting the HPAs: %w", err)
	}
	if err := r.watch.waitGone(ctx, 2*time.Minute); err != nil {
		return err
	}
	patch := []byte(`{"spec":{"replicas":1}}`)
	err := forEach(ctx, r.o.ScaledObjects, 16, nil, func(ctx context.Context, i int) error {
		_, err := r.cs.AppsV1().Deployments(kedaNS).Patch(ctx, deploymentName(i), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("scaling the Deployments back to 1: %w", err)
	}
	return r.waitDeploymentsReady(ctx)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
