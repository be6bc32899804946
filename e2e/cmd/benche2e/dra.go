package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/extender/devices"
	"github.com/capscale/capscale/internal/names"
)

// DRA mode against the plain extended resource (issue 56): side dra's pods
// ask for capscale.io/underlay-ip, which no Node advertises, so the plane's
// stock kube-scheduler allocates it from the devices capscale's publisher
// (the extender binary, --publish-devices; 10 a node by its default
// capacity) keeps in one ResourceSlice per node, through deploy/dra's
// DeviceClass; side native's pods ask for the plain resource the same kwok
// nodes advertise in their status. budgetCost then prices one node's budget
// change both ways.

// draMode says whether mode is DRA mode against the plain resource.
func draMode(mode string) bool { return mode == "dra" || mode == "dra-unscored" }

// draSchedulerConfig edits the KubeSchedulerConfiguration m (native mode's,
// which DRA mode ships) so that NodeResourcesFit scores the plain resource
// as it scores capscale.io/underlay-ip: both sides rank nodes by their free
// share of the resource they ask for, with the same weight. Unless scored:
// then neither is scored (dra-unscored), as with kube-scheduler's default
// strategy, which ranks by CPU and memory only.
func draSchedulerConfig(m map[string]any, scored bool) error {
	profiles, _ := m["profiles"].([]any)
	for _, p := range profiles {
		prof, _ := p.(map[string]any)
		configs, _ := prof["pluginConfig"].([]any)
		for _, c := range configs {
			pc, _ := c.(map[string]any)
			if pc["name"] != "NodeResourcesFit" {
				continue
			}
			args, _ := pc["args"].(map[string]any)
			strategy, _ := args["scoringStrategy"].(map[string]any)
			resources, _ := strategy["resources"].([]any)
			for i, r := range resources {
				if res, _ := r.(map[string]any); res["name"] == names.UnderlayIPResource {
					if scored {
						strategy["resources"] = append(resources, map[string]any{"name": nativeResource, "weight": res["weight"]})
					} else {
						strategy["resources"] = append(resources[:i:i], resources[i+1:]...)
					}
					return nil
				}
			}
		}
	}
	return fmt.Errorf("no profile scores %s in NodeResourcesFit's scoringStrategy", names.UnderlayIPResource)
}

// waitDevicesPublished returns once every one of n nodes' pools of
// capscale's driver holds want devices.
func waitDevicesPublished(ctx context.Context, cs kubernetes.Interface, n, want int) error {
	deadline := time.Now().Add(15 * time.Minute)
	for {
		list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + devices.Driver})
		if err == nil {
			perPool := map[string]int{}
			for _, s := range list.Items {
				perPool[s.Spec.Pool.Name] += len(s.Spec.Devices)
			}
			full := 0
			for _, d := range perPool {
				if d == want {
					full++
				}
			}
			if full == n {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d nodes publish %d devices after 15m", full, n, want)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// The two ways a budget change reaches kube-scheduler, each started by one
// Node annotation patch (an operator's, or a capacity source's mirror):
const (
	// armSlice: capscale's capacity annotation; DRA mode's publisher
	// rewrites the node's ResourceSlice.
	armSlice = "dra-slice"
	// armStatus: an annotation capscale does not read, then the Node
	// status patch native mode's publisher writes (publisher.Patch's shape)
	// of the plain resource.
	armStatus = "node-status"
)

// budgetMark is armStatus's annotation, and its published marker.
const budgetMark = "bench.capscale.io/budget"

// budgetRounds is how many rounds of changes each arm makes, alternated;
// even, so that every node ends at the budget it started with.
const budgetRounds = 4

// budgetRound is one round of one arm: per change.
type budgetRound struct {
	CPU     map[string]float64 `json:"cpu_ms"`  // per change by process
	Traffic map[string]float64 `json:"traffic"` // traffic.flat's keys, per change
	// SliceWrites are the publisher's own count of its ResourceSlice
	// writes (capscale_extender_device_slice_writes_total), per change.
	SliceWrites float64 `json:"slice_writes"`
}

// budgetCost changes the budget of k nodes a round (k = min(changes,
// nodes)), budgetRounds rounds an arm, the arms alternated, and returns
// their figures. Each round starts and ends on a quiet plane and is charged
// what the plane did beyond idle.
func (r *rig) budgetCost(ctx context.Context, changes, nodes int) (budgetReport, error) {
	k := min(changes, nodes)
	rounds := map[string][]budgetRound{}
	fmt.Printf("budget round\tarm\tcpu ms/change (sched ext api etcd kwok kcm)\tslice writes/change\n")
	for round := range budgetRounds {
		want := int64(9)
		if round%2 == 1 {
			want = 10
		}
		for _, arm := range sidesOfRound(round, armSlice, armStatus) {
			res, err := r.budgetRound(ctx, arm, k, want)
			if err != nil {
				return budgetReport{}, fmt.Errorf("budget round %d, %s: %w", round, arm, err)
			}
			rounds[arm] = append(rounds[arm], res)
			fmt.Printf("%d\t%s\t%.2f (%s)\t%.2f\n", round, arm, total(res.CPU), formatCPU(res.CPU), res.SliceWrites)
		}
	}
	rep := budgetReportOf(nodes, k, rounds)
	for _, arm := range []string{armSlice, armStatus} {
		fmt.Printf("budget change, %s: CPU ms/change %s; slice writes/change %.2f\n  API traffic per change: %s\n",
			arm, formatMap(rep.Arms[arm].CPU, 1), rep.Arms[arm].SliceWrites, trafficFigure(rep.Arms[arm].Traffic))
	}
	return rep, nil
}

// budgetRound makes k budget changes on nodes 0..k-1 by arm, each to want.
func (r *rig) budgetRound(ctx context.Context, arm string, k int, want int64) (budgetRound, error) {
	pids := livePids(r.s.Plane)
	if _, _, err := waitQuiet(ctx, pids, r.idle, 90*time.Second); err != nil {
		return budgetRound{}, err
	}
	before, err := r.scrape(ctx, pids)
	if err != nil {
		return budgetRound{}, err
	}
	start := time.Now()
	nodes := r.bench.CoreV1().Nodes()
	for i := range k {
		name := plane.NodeName(i)
		v := strconv.FormatInt(want, 10)
		var err error
		switch arm {
		case armSlice:
			_, err = nodes.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, names.UnderlayIPCapacityAnnotation, v), metav1.PatchOptions{})
		case armStatus:
			_, err = nodes.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, budgetMark, v), metav1.PatchOptions{})
			if err == nil {
				_, err = nodes.Patch(ctx, name, types.StrategicMergePatchType, statusPatch(want), metav1.PatchOptions{}, "status")
			}
		}
		if err != nil {
			return budgetRound{}, fmt.Errorf("node %s: %w", name, err)
		}
	}
	if arm == armSlice {
		if err := waitSlices(ctx, r.bench, k, int(want)); err != nil {
			return budgetRound{}, err
		}
	}
	if _, _, err := waitQuiet(ctx, pids, r.idle, 90*time.Second); err != nil {
		return budgetRound{}, err
	}
	after, err := r.scrape(ctx, pids)
	if err != nil {
		return budgetRound{}, err
	}
	wall := time.Since(start)
	writes := func(f metricFamilies) float64 {
		return f.counters("capscale_extender_device_slice_writes_total", "verb", "result")["update/ok"]
	}
	return budgetRound{
		CPU:         cpuMsPerPod(before.cpu, after.cpu, wall, r.idle, k),
		Traffic:     perUnit(apiTraffic(before.apiSrv, after.apiSrv).flat(), r.idleTraffic, wall, k),
		SliceWrites: (writes(after.extender) - writes(before.extender)) / float64(k),
	}, nil
}

// statusPatch is native mode's publisher's write (publisher.Patch) for the
// plain resource: the marker and the resource in one nodes/status patch.
func statusPatch(want int64) []byte {
	return fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"status":{"capacity":{%q:"%d"},"allocatable":{%q:"%d"}}}`,
		budgetMark+"-published", strconv.FormatInt(want, 10), nativeResource, want, nativeResource, want)
}

// waitSlices returns once nodes 0..k-1 each publish want devices.
func waitSlices(ctx context.Context, cs kubernetes.Interface, k, want int) error {
	pending := map[string]bool{}
	for i := range k {
		pending[plane.NodeName(i)] = true
	}
	deadline := time.Now().Add(time.Minute)
	for len(pending) > 0 {
		for node := range pending {
			s, err := cs.ResourceV1().ResourceSlices().Get(ctx, devices.SliceName(node, 0), metav1.GetOptions{})
			if err == nil && len(s.Spec.Devices) == want {
				delete(pending, node)
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d nodes' slices still not at %d devices after 1m", len(pending), k, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// budgetArm is one arm's figures: medians of its rounds, per change.
type budgetArm struct {
	Rounds      int                `json:"rounds"`
	CPU         map[string]float64 `json:"cpu_ms_per_change"`
	Traffic     map[string]float64 `json:"traffic_per_change"`
	SliceWrites float64            `json:"slice_writes_per_change"`
}

// budgetReport is budgetCost's figures.
type budgetReport struct {
	Nodes   int                  `json:"nodes"`
	Changes int                  `json:"changes_per_round"`
	Arms    map[string]budgetArm `json:"arms"`
}

// budgetReportOf takes each arm's medians over its rounds; a key a round
// did not see counts 0 there.
func budgetReportOf(nodes, changes int, rounds map[string][]budgetRound) budgetReport {
	rep := budgetReport{Nodes: nodes, Changes: changes, Arms: map[string]budgetArm{}}
	for arm, rs := range rounds {
		cpu, tr := map[string][]float64{}, map[string][]float64{}
		var writes []float64
		for _, r := range rs {
			for k, v := range r.CPU {
				cpu[k] = append(cpu[k], v)
			}
			for k, v := range r.Traffic {
				tr[k] = append(tr[k], v)
			}
			writes = append(writes, r.SliceWrites)
		}
		a := budgetArm{Rounds: len(rs), CPU: map[string]float64{}, Traffic: map[string]float64{}, SliceWrites: summarize(writes).Median}
		for k, v := range cpu {
			a.CPU[k] = summarize(append(v, make([]float64, len(rs)-len(v))...)).Median
		}
		for k, v := range tr {
			a.Traffic[k] = summarize(append(v, make([]float64, len(rs)-len(v))...)).Median
		}
		rep.Arms[arm] = a
	}
	return rep
}

// budgetRows are budgetCost's rows: one an arm.
func budgetRows(rep budgetReport) []row {
	what := map[string]string{
		armSlice:  "DRA mode (the capacity annotation, then the publisher's ResourceSlice update)",
		armStatus: "native mode's writes (an annotation, then the Node status patch of a plain extended resource)",
	}
	var out []row
	for _, arm := range []string{armSlice, armStatus} {
		a, ok := rep.Arms[arm]
		if !ok {
			continue
		}
		fig := fmt.Sprintf("CPU ms per change: kube-scheduler %.2f, publisher (extender) %.2f, kube-apiserver %.2f, all %.2f; %s",
			a.CPU["kube-scheduler"], a.CPU["extender"], a.CPU["kube-apiserver"], total(a.CPU), trafficFigure(a.Traffic))
		if arm == armSlice {
			fig += fmt.Sprintf("; the publisher's slice writes %.2f", a.SliceWrites)
		}
		out = append(out, row{
			Measure: fmt.Sprintf("One node's budget change, %s, %d nodes", what[arm], rep.Nodes),
			Figure:  fig,
			Spread:  fmt.Sprintf("medians of %d rounds of %d changes", a.Rounds, rep.Changes),
		})
	}
	return out
}
