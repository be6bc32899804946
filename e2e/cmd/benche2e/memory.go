package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// memory reports the extender's and the adapter's RSS with nodes kwok nodes
// and pods pods (each holding one underlay IP, bound directly) in their
// informers (issue 7, item 5), then again after restarting the adapter (its
// initial list of every pod is the peak). With baselineAdapter, that binary
// runs beside the adapter against the same plane and is reported too
// (issue 18: before and after, same run).
func memory(ctx context.Context, nodes, pods int, binDir, baselineAdapter string) error {
	if pods > nodes*10 {
		return fmt.Errorf("at most 10 pods per node: %d pods need %d nodes", pods, (pods+9)/10)
	}
	run := thisRun(time.Now(), loadAverage())
	ctx, cancel := context.WithTimeout(ctx, 60*time.Minute)
	defer cancel()
	start := time.Now()
	s, err := stack.Start(ctx, stack.Options{
		BinDir: binDir,
		Plane: plane.Options{
			BinDir: binDir, Nodes: nodes,
			Logf: func(f string, a ...any) { fmt.Printf("# "+f+"\n", a...) },
		},
		Extender: true, Adapter: true,
	})
	if err != nil {
		return err
	}
	defer s.Stop()
	fmt.Printf("# plane with %d nodes, extender and adapter up in %.1fs\n", nodes, time.Since(start).Seconds())
	var baseline *stack.AdapterReplica
	if baselineAdapter != "" {
		if baseline, err = s.StartExtraAdapter(ctx, baselineAdapter); err != nil {
			return fmt.Errorf("starting the baseline adapter %s: %w", baselineAdapter, err)
		}
	}
	// report prints the three processes' memory and returns it: extender,
	// adapter, baseline adapter ("" without one).
	report := func(when string) (ext, adapter, base string) {
		ext, adapter = rss(s.Extender.Pid()), rss(s.Adapter.Pid())
		line := fmt.Sprintf("%s\textender %s\tadapter %s", when, ext, adapter)
		if baseline != nil {
			base = rss(baseline.Proc.Pid())
			line += "\tbaseline adapter " + base
		}
		fmt.Println(line)
		return ext, adapter, base
	}
	report("nodes only")

	const ns = "memory"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		return err
	}
	cfg := rest.CopyConfig(s.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	one := resource.MustParse("1")
	var created atomic.Int64
	t0 := time.Now()
	progress, stop := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-progress.Done():
				return
			case <-t.C:
				fmt.Printf("# %d pods created (%.0fs)\n", created.Load(), time.Since(t0).Seconds())
			}
		}
	}()
	err = forEach(ctx, pods, 64, &created, func(ctx context.Context, i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%05d", i), Namespace: ns, Labels: map[string]string{"app": "memory"}},
			Spec: corev1.PodSpec{
				NodeName: plane.NodeName(i / 10),
				Containers: []corev1.Container{{
					Name: "app", Image: "registry.example/memory:1",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{names.UnderlayIPResource: one, corev1.ResourceCPU: resource.MustParse("10m")},
						Limits:   corev1.ResourceList{names.UnderlayIPResource: one},
					},
				}},
			},
		}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	stop()
	if err != nil {
		return fmt.Errorf("creating pods: %w", err)
	}
	fmt.Printf("# %d pods created in %.0fs\n", pods, time.Since(t0).Seconds())
	// Wait until the extender's ledger holds them all.
	c, err := s.HTTPClient()
	if err != nil {
		return err
	}
	want := fmt.Sprintf("capscale_extender_used_ips %d", pods)
	for deadline := time.Now().Add(10 * time.Minute); ; {
		resp, err := c.Get(s.ExtenderURL + "/metrics")
		if err == nil {
			var b strings.Builder
			_, _ = ioCopy(&b, resp)
			if strings.Contains(b.String(), want+"\n") {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the extender never counted %d used IPs", pods)
		}
		time.Sleep(2 * time.Second)
	}
	// Let the informers settle and the Go runtime give back what it freed.
	time.Sleep(15 * time.Second)
	ext, adapter, base := report(fmt.Sprintf("%d pods", pods))

	// A restarted adapter lists every pod at once: its peak is what the
	// memory limit must hold.
	restarts := []*stack.AdapterReplica{s.Adapters[0]}
	if baseline != nil {
		restarts = append(restarts, baseline)
	}
	for _, r := range restarts {
		t := time.Now()
		if err := s.RestartAdapterReplica(ctx, r); err != nil {
			return fmt.Errorf("restarting the adapter: %w", err)
		}
		fmt.Printf("# adapter %s restarted and ready (informers synced) in %.1fs\n", r.URL, time.Since(t).Seconds())
	}
	time.Sleep(15 * time.Second)
	_, restarted, _ := report(fmt.Sprintf("%d pods, adapters restarted", pods))
	printRows(memoryRows(nodes, pods, ext, adapter, restarted, base), run)
	return nil
}

// rss reads VmRSS and VmHWM (peak) of a process.
func rss(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "n/a"
	}
	var cur, peak string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "VmRSS:" {
			cur = kbToMiB(f[1])
		}
		if len(f) >= 2 && f[0] == "VmHWM:" {
			peak = kbToMiB(f[1])
		}
	}
	return fmt.Sprintf("RSS %s MiB (peak %s MiB)", cur, peak)
}

func kbToMiB(kb string) string {
	var n int64
	fmt.Sscan(kb, &n)
	return fmt.Sprintf("%.1f", float64(n)/1024)
}

func ioCopy(b *strings.Builder, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(b, resp.Body)
}
