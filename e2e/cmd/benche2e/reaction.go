package main

import (
	"context"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/loadsource"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// reactionConfig: a 5s source interval, and a step policy that moves one
// replica per change with nothing else gating it (no minPodAge, a 1s
// interval), so what is measured is the pipeline's latency.
const reactionConfig = `sources:
- name: load
  url: %s
  jsonPath: '{.data.load_balance}'
  interval: 5s
  timeout: 2s
  maxAge: 1m
  tls: {caFile: %s}
stepPolicies:
- workload: {namespace: bench, kind: Deployment, name: gpu}
  source: load
  scaleUpAbove: 0.8
  scaleDownBelow: 0.5
  stepUp: 1
  stepDown: 1
  minReplicas: 1
  maxReplicas: 20
  minPodAge: 0s
  interval: 1s
`

// reaction measures, over changes load-index flips, the time from the flip at
// the source to the Deployment's spec.replicas changing, with the HPA
// controller's default 15s sync (issue 7, item 4).
func reaction(ctx context.Context, changes int, binDir string) error {
	run := thisRun(time.Now(), loadAverage())
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	src := &loadsource.Source{}
	src.Set(0.65)
	srv := httptest.NewTLSServer(src)
	defer srv.Close()
	dir, err := os.MkdirTemp("", "capscale-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "adapter.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(reactionConfig, srv.URL+"/load", caFile)), 0o644); err != nil {
		return err
	}
	s, err := stack.Start(ctx, stack.Options{
		BinDir:        binDir,
		Plane:         plane.Options{BinDir: binDir, Nodes: 3, HPASyncPeriod: 15 * time.Second},
		Adapter:       true,
		AdapterConfig: cfg,
	})
	if err != nil {
		return err
	}
	defer s.Stop()
	const ns = "bench"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		return err
	}
	labels := map[string]string{"app": "gpu"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/gpu:1"}}}},
		},
	}
	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return err
	}
	zero := resource.MustParse("0")
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpu"},
			MinReplicas:    ptr.To(int32(1)), MaxReplicas: 20,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: names.DesiredReplicasMetric, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"workload": "gpu", "policy": names.PolicyLoadStep}}},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewQuantity(1, resource.DecimalSI)},
			}}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp:   &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32(0)), Tolerance: &zero, Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 1}}},
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32(0)), Tolerance: &zero, Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 1}}},
			},
		},
	}
	if _, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		return err
	}
	replicas := func() (int32, error) {
		d, err := s.Client.AppsV1().Deployments(ns).Get(ctx, "gpu", metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		return *d.Spec.Replicas, nil
	}
	// Settle: the HPA has read the metric at least once.
	time.Sleep(20 * time.Second)
	var lat []float64
	fmt.Printf("change\tload\treplicas\tseconds\n")
	for i := 0; i < changes; i++ {
		before, err := replicas()
		if err != nil {
			return err
		}
		load := 0.95
		if i%2 == 1 {
			load = 0.3
		}
		// A random wait, so flips land at random points of the HPA's and
		// the poller's cycles instead of phase-locked to them.
		time.Sleep(time.Duration(rand.Int64N(int64(15 * time.Second))))
		t0 := time.Now()
		src.Set(load)
		for {
			now, err := replicas()
			if err != nil {
				return err
			}
			if now != before {
				d := time.Since(t0).Seconds()
				lat = append(lat, d)
				fmt.Printf("%d\t%.2f\t%d->%d\t%.2f\n", i, load, before, now, d)
				break
			}
			if time.Since(t0) > 2*time.Minute {
				return fmt.Errorf("change %d: replicas stayed %d for 2 minutes", i, before)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Hold the new value until the next flip: no further step, since
		// the opposite value comes next.
		src.Set(0.65)
		time.Sleep(time.Second)
	}
	sort.Float64s(lat)
	sum := 0.0
	for _, v := range lat {
		sum += v
	}
	fmt.Printf("reaction over %d changes: min %.2fs, median %.2fs, mean %.2fs, max %.2fs (goal: max <= 5s source interval + 15s HPA sync + 1s = 21s)\n",
		len(lat), lat[0], lat[len(lat)/2], sum/float64(len(lat)), lat[len(lat)-1])
	printRows(reactionRows(lat), run)
	return nil
}
