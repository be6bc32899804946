// Command benche2e is `make bench-e2e`: it measures capscale inside a real
// control plane and prints figures; it asserts nothing about speed.
//
// Scheduling throughput (issue 7, item 1): one plane of N kwok nodes whose
// scheduler calls the extender; pods alternate, round by round, between
// (a) requesting capscale.io/underlay-ip (filter, prioritize and bind go
// through the extender) and (b) requesting the same capacity as a native
// extended resource the nodes advertise (capscale.io/underlay-ip-native: 10;
// kube-scheduler alone). Same cluster, same run, alternating sides, so the
// ratio a/b is robust to a noisy machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// nativeResource is the same capacity as a plain extended resource, which
// the extender does not manage.
const nativeResource = names.UnderlayIPResource + "-native"

func main() {
	nodes := flag.Int("nodes", 500, "kwok nodes")
	pods := flag.Int("pods", 2000, "pods per side (extender, native)")
	rounds := flag.Int("rounds", 4, "rounds per side, alternating")
	binDir := flag.String("bin-dir", "_output/bin", "control-plane and capscale binaries")
	scenario := flag.String("scenario", "all", "throughput, reaction, memory, metrics, delegate or all (all but metrics and delegate, which make bench runs)")
	series := flag.Int("series", 1000, "series for the metrics scenario")
	clients := flag.Int("clients", 100, "concurrent clients for the metrics scenario")
	phase := flag.Duration("phase", 8*time.Second, "length of each load phase of the metrics scenario")
	rate := flag.Int("rate", 0, "metrics scenario: open-loop requests per second (0: closed loop with --clients)")
	memNodes := flag.Int("memory-nodes", 5000, "kwok nodes for the memory scenario")
	memPods := flag.Int("memory-pods", 50000, "pods for the memory scenario")
	samples := flag.Int("samples", 3000, "delegate scenario: timed GETs per path")
	changes := flag.Int("changes", 10, "load-index changes for the reaction scenario")
	clientQPS := flag.Int("client-qps", 0, "if set, kube-scheduler's and the extender's client QPS (burst twice that); 0 keeps the deployed defaults (50/100)")
	flag.Parse()
	var err error
	switch *scenario {
	case "throughput":
		err = run(*nodes, *pods, *rounds, *clientQPS, *binDir)
	case "reaction":
		err = reaction(*changes, *binDir)
	case "memory":
		err = memory(*memNodes, *memPods, *binDir)
	case "metrics":
		err = metricsLoad(*series, *clients, *rate, *phase, *binDir)
	case "delegate":
		err = delegateOverhead(*samples, *binDir)
	case "all":
		if err = run(*nodes, *pods, *rounds, *clientQPS, *binDir); err == nil {
			err = reaction(*changes, *binDir)
		}
		if err == nil {
			err = memory(*memNodes, *memPods, *binDir)
		}
	default:
		err = fmt.Errorf("--scenario must be throughput, reaction, memory, metrics, delegate or all, got %q", *scenario)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benche2e:", err)
		os.Exit(1)
	}
}

func run(nodes, pods, rounds, clientQPS int, binDir string) error {
	if pods%rounds != 0 || pods > nodes*10 {
		return fmt.Errorf("--pods must be a multiple of --rounds and at most 10 per node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ten := resource.MustParse("10")
	start := time.Now()
	schedCfg, extArgs, err := clientLimits(clientQPS)
	if err != nil {
		return err
	}
	if clientQPS != 0 {
		defer os.Remove(schedCfg)
	}
	s, err := stack.Start(ctx, stack.Options{
		SchedulerConfigFile: schedCfg,
		ExtenderArgs:        extArgs,
		BinDir:              binDir,
		Plane: plane.Options{
			BinDir: binDir, Nodes: nodes,
			Node: func(_ int, n *corev1.Node) {
				n.Status.Capacity[nativeResource] = ten
				n.Status.Allocatable[nativeResource] = ten
			},
			Logf: func(f string, a ...any) { fmt.Printf("# "+f+"\n", a...) },
		},
		Extender: true,
	})
	if err != nil {
		return err
	}
	defer s.Stop()
	fmt.Printf("# plane with %d nodes and the extender up in %.1fs; client QPS %s\n", nodes, time.Since(start).Seconds(), qpsLabel(clientQPS))
	const ns = "bench"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		return err
	}
	w := newBindWatcher(ctx, s.Client, ns)

	per := pods / rounds
	type result struct {
		side    string
		pods    int
		seconds float64
	}
	var results []result
	fmt.Printf("round\tside\tpods\tseconds\tpods/s\n")
	for r := 0; r < rounds; r++ {
		sides := []string{"extender", "native"}
		if r%2 == 1 {
			sides = []string{"native", "extender"}
		}
		for _, side := range sides {
			res := corev1.ResourceName(names.UnderlayIPResource)
			if side == "native" {
				res = nativeResource
			}
			prefix := fmt.Sprintf("%s-%d", side, r)
			secs, err := scheduleBatch(ctx, s.Client, w, ns, prefix, res, per)
			if err != nil {
				return err
			}
			results = append(results, result{side, per, secs})
			fmt.Printf("%d\t%s\t%d\t%.2f\t%.1f\n", r, side, per, secs, float64(per)/secs)
		}
	}
	total := map[string][2]float64{}
	for _, r := range results {
		t := total[r.side]
		total[r.side] = [2]float64{t[0] + float64(r.pods), t[1] + r.seconds}
	}
	a := total["extender"][0] / total["extender"][1]
	b := total["native"][0] / total["native"][1]
	fmt.Printf("extender: %.0f pods in %.2fs = %.1f pods/s\n", total["extender"][0], total["extender"][1], a)
	fmt.Printf("native:   %.0f pods in %.2fs = %.1f pods/s\n", total["native"][0], total["native"][1], b)
	fmt.Printf("ratio extender/native: %.2f\n", a/b)
	return checkCapacity(ctx, s.Client, ns)
}

// scheduleBatch creates n pods as fast as the client allows and returns the
// seconds from the first create until the last pod is bound.
func scheduleBatch(ctx context.Context, cs kubernetes.Interface, w *bindWatcher, ns, prefix string, res corev1.ResourceName, n int) (float64, error) {
	one := resource.MustParse("1")
	start := time.Now()
	err := forEach(ctx, n, 32, nil, func(ctx context.Context, i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%04d", prefix, i), Namespace: ns, Labels: map[string]string{"batch": prefix}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/bench:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{res: one}, Limits: corev1.ResourceList{res: one}},
			}}},
		}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("creating pods: %w", err)
	}
	last, err := w.waitBound(ctx, prefix, n, 10*time.Minute)
	if err != nil {
		return 0, err
	}
	return last.Sub(start).Seconds(), nil
}

// bindWatcher records when each pod was first seen bound.
type bindWatcher struct {
	mu      sync.Mutex
	boundAt map[string]time.Time // pod name -> first seen with a node
	batch   map[string]string    // pod name -> batch label
}

func newBindWatcher(ctx context.Context, cs kubernetes.Interface, ns string) *bindWatcher {
	w := &bindWatcher{boundAt: map[string]time.Time{}, batch: map[string]string{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = fields.Everything().String() }))
	inf := f.Core().V1().Pods().Informer()
	record := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		w.mu.Lock()
		if _, seen := w.boundAt[p.Name]; !seen {
			w.boundAt[p.Name] = time.Now()
			w.batch[p.Name] = p.Labels["batch"]
		}
		w.mu.Unlock()
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, o any) { record(o) }})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return w
}

func (w *bindWatcher) waitBound(ctx context.Context, batch string, n int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		var times []time.Time
		for name, b := range w.batch {
			if b == batch {
				times = append(times, w.boundAt[name])
			}
		}
		w.mu.Unlock()
		if len(times) == n {
			sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
			return times[n-1], nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("batch %s: %d of %d pods bound after %s", batch, len(times), n, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkCapacity verifies that no node holds more than 10 of either resource.
func checkCapacity(ctx context.Context, cs kubernetes.Interface, ns string) error {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	used := map[string]int{}
	for _, p := range list.Items {
		for r := range p.Spec.Containers[0].Resources.Limits {
			used[p.Spec.NodeName+"/"+string(r)]++
		}
	}
	for k, v := range used {
		if v > 10 {
			return fmt.Errorf("over capacity: %s holds %d", k, v)
		}
	}
	fmt.Printf("# checked: no node above 10 of either resource (%d pods)\n", len(list.Items))
	return nil
}

// clientLimits returns the scheduler config file and extender flags for the
// given client QPS; 0 keeps deploy/'s configuration and the defaults.
func clientLimits(qps int) (string, []string, error) {
	file := stack.DeployFile("scheduler/kube-scheduler-config.yaml")
	if qps == 0 {
		return file, nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return "", nil, err
	}
	m["clientConnection"] = map[string]any{"qps": qps, "burst": 2 * qps}
	out, err := yaml.Marshal(m)
	if err != nil {
		return "", nil, err
	}
	f, err := os.CreateTemp("", "capscale-bench-scheduler-*.yaml")
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	if _, err := f.Write(out); err != nil {
		return "", nil, err
	}
	return f.Name(), []string{fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", 2*qps)}, nil
}

func qpsLabel(qps int) string {
	if qps == 0 {
		return "as deployed (50, burst 100)"
	}
	return fmt.Sprintf("%d, burst %d", qps, 2*qps)
}
