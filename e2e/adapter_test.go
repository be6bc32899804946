//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	externalmetrics "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/loadsource"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

const adapterNS = "e2e-adapter"

// adapterConfig: the source is polled every second and stale after 8s; the
// step policy keeps gpu within [4, 7], one step per 5s, no scale-down while a
// pod is younger than 15s.
const adapterConfig = `sources:
- name: gpu-load
  url: %s
  jsonPath: '{.data.load_balance}'
  interval: 1s
  timeout: 1s
  maxAge: 8s
  tls: {caFile: %s}
stepPolicies:
- workload: {namespace: ` + adapterNS + `, kind: Deployment, name: gpu}
  source: gpu-load
  scaleUpAbove: 0.8
  scaleDownBelow: 0.5
  stepUp: 3
  stepDown: 1
  minReplicas: 4
  maxReplicas: 7
  minPodAge: 15s
  interval: 5s
`

// startAdapterStack runs a TLS load source in this process (its certificate
// given to the adapter as caFile: verified TLS) and the adapter behind the
// real APIService, with a 2s HPA sync.
func startAdapterStack(t *testing.T, initial float64, more ...func(*stack.Options)) (*stack.Stack, *loadsource.Source) {
	t.Helper()
	s, src, _ := startAdapterStackWith(t, initial, adapterConfig, nil, more...)
	return s, src
}

// startAdapterStackWith is startAdapterStack with a config template (%[1]s
// the source URL, %[2]s its CA file, then configArgs); it also returns a
// function that rewrites the config file from the template with other
// arguments, as a ConfigMap update would (atomically).
func startAdapterStackWith(t *testing.T, initial float64, configTemplate string, configArgs []any, more ...func(*stack.Options)) (*stack.Stack, *loadsource.Source, func(args ...any)) {
	t.Helper()
	src := &loadsource.Source{}
	src.Set(initial)
	srv := httptest.NewTLSServer(src)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "source-ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "adapter.yaml")
	writeConfig := func(args ...any) {
		t.Helper()
		tmp := cfg + ".new"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf(configTemplate, append([]any{srv.URL + "/load", caFile}, args...)...)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(configArgs...)
	ctx := testContext(t, 3*time.Minute)
	o := stack.Options{
		BinDir:        capscaleBin,
		Plane:         plane.Options{Nodes: 3, Logf: t.Logf, HPASyncPeriod: 2 * time.Second},
		Adapter:       true,
		AdapterConfig: cfg,
	}
	for _, f := range more {
		f(&o)
	}
	s, err := stack.Start(ctx, o)
	if err != nil {
		t.Fatalf("starting stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs:\n%s", s.LogTails(80))
		}
		s.Stop()
	})
	if err := s.WaitForNamespace(ctx, adapterNS); err != nil {
		t.Fatal(err)
	}
	return s, src, writeConfig
}

// externalMetric reads a metric through the aggregator, as the HPA does.
func externalMetric(ctx context.Context, s *stack.Stack, metric, selector string) (*externalmetrics.ExternalMetricValueList, error) {
	raw, err := s.Client.Discovery().RESTClient().Get().
		AbsPath("/apis/external.metrics.k8s.io/v1beta1/namespaces", adapterNS, metric).
		Param("labelSelector", selector).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, raw)
	}
	var list externalmetrics.ExternalMetricValueList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

func desiredReplicasHPA(name, policy string, min, max int32) *autoscalingv2.HorizontalPodAutoscaler {
	zero := resource.MustParse("0")
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: adapterNS},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To(min),
			MaxReplicas:    max,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ExternalMetricSourceType,
				External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{
						Name:     names.DesiredReplicasMetric,
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"workload": name, "policy": policy}},
					},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewQuantity(1, resource.DecimalSI)},
				},
			}},
			// Exact steps: no tolerance, no stabilization window.
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp:   &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32(0)), Tolerance: &zero},
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32(0)), Tolerance: &zero},
			},
		},
	}
	if policy == names.PolicyLoadStep {
		// The HPA's default rate limit (4 pods per 15s, counted from earlier
		// changes) would cut a step short: allow exactly the step sizes over
		// a short period and let the policy's interval pace the steps.
		hpa.Spec.Behavior.ScaleUp.Policies = []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 3, PeriodSeconds: 1}}
		hpa.Spec.Behavior.ScaleDown.Policies = []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 1}}
	}
	return hpa
}

// replicaTrace records every spec.replicas value a Deployment takes.
type replicaTrace struct {
	values []int32
	times  []time.Time
}

// waitReplicas polls the Deployment until spec.replicas is want, recording
// each change; it fails if a change is not allowed by step.
func waitReplicas(ctx context.Context, t *testing.T, s *stack.Stack, name string, want int32, timeout time.Duration, tr *replicaTrace, allowed func(from, to int32) bool) {
	t.Helper()
	var cur int32 = -1
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := s.Client.AppsV1().Deployments(adapterNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cur = *d.Spec.Replicas
		if tr != nil && (len(tr.values) == 0 || tr.values[len(tr.values)-1] != cur) {
			if len(tr.values) > 0 && allowed != nil && !allowed(tr.values[len(tr.values)-1], cur) {
				return false, fmt.Errorf("replicas moved %d -> %d, not an allowed step", tr.values[len(tr.values)-1], cur)
			}
			tr.values = append(tr.values, cur)
			tr.times = append(tr.times, time.Now())
		}
		return cur == want, nil
	})
	if err != nil {
		t.Fatalf("Deployment %s: want %d replicas, have %d: %v (trace %v)", name, want, cur, err, traceValues(tr))
	}
}

func traceValues(tr *replicaTrace) []int32 {
	if tr == nil {
		return nil
	}
	return tr.values
}

func youngestPodAge(ctx context.Context, s *stack.Stack, selector string) (time.Duration, error) {
	pods, err := s.Client.CoreV1().Pods(adapterNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, err
	}
	youngest := time.Duration(1 << 62)
	for _, p := range pods.Items {
		if age := time.Since(p.CreationTimestamp.Time); age < youngest {
			youngest = age
		}
	}
	return youngest, nil
}

// TestAdapterLoadStep drives a real HPA through the load-step policy and
// then stops the source (issue 4, scenarios 1, 2 and 4).
func TestAdapterLoadStep(t *testing.T) {
	s, src := startAdapterStack(t, 0.65)
	ctx := testContext(t, 8*time.Minute)

	// 1. The load index through the aggregator, with its sample time.
	src.Set(0.65)
	var list *externalmetrics.ExternalMetricValueList
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := externalMetric(ctx, s, names.LoadIndexMetric, "source=gpu-load")
		if err != nil {
			return false, nil
		}
		list = l
		return len(l.Items) == 1 && l.Items[0].Value.Cmp(resource.MustParse("650m")) == 0, nil
	})
	if err != nil {
		t.Fatalf("load index through the aggregator: %v (last %+v)", err, list)
	}
	item := list.Items[0]
	if age := time.Since(item.Timestamp.Time); item.Timestamp.IsZero() || age < -2*time.Second || age > 5*time.Second {
		t.Errorf("load index timestamp %v is not a recent sample time (age %v)", item.Timestamp, age)
	}
	if item.MetricLabels["source"] != "gpu-load" {
		t.Errorf("metric labels %v, want source=gpu-load", item.MetricLabels)
	}
	if _, err := externalMetric(ctx, s, names.LoadIndexMetric, "source=nope"); err == nil {
		t.Errorf("an unknown source answered without error")
	}

	// 2. The load-step policy through a real HPA: between thresholds the
	// count is clamped to min (1 -> 4).
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Create(ctx, SimpleDeployment(adapterNS, "gpu", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Create(ctx, desiredReplicasHPA("gpu", names.PolicyLoadStep, 1, 20), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, s, "gpu", 4, time.Minute, nil, nil)

	// Above 0.8: up by 3, then bounded by max 7.
	src.Set(0.93)
	up := &replicaTrace{values: []int32{4}}
	waitReplicas(ctx, t, s, "gpu", 7, time.Minute, up, func(from, to int32) bool { return to == min(from+3, 7) })
	holdReplicas(ctx, t, s, "gpu", 7, 8*time.Second)

	// Below 0.5: nothing until every pod is older than 15s, then down by 1
	// per step to min 4, and no further.
	src.Set(0.3)
	down := &replicaTrace{values: []int32{7}}
	waitReplicas(ctx, t, s, "gpu", 6, time.Minute, down, func(from, to int32) bool { return to == from-1 })
	if age, err := youngestPodAge(ctx, s, "app=gpu"); err != nil || age < 15*time.Second {
		t.Errorf("scaled down while the youngest pod was %v old (minPodAge 15s): %v", age, err)
	}
	waitReplicas(ctx, t, s, "gpu", 4, time.Minute, down, func(from, to int32) bool { return to == from-1 })
	for i := 1; i < len(down.times); i++ {
		if gap := down.times[i].Sub(down.times[i-1]); gap < 4*time.Second {
			t.Errorf("two steps %v apart, want at most one per 5s interval (trace %v)", gap, down.values)
		}
	}
	holdReplicas(ctx, t, s, "gpu", 4, 8*time.Second)

	// 4. The source stops answering: after maxAge the metric is an error,
	// never 0, and the HPA holds the count.
	src.Set(0.95)
	src.SetDown(true)
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := externalMetric(ctx, s, names.LoadIndexMetric, "source=gpu-load")
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("the load index did not turn stale after maxAge: %v", err)
	}
	holdReplicas(ctx, t, s, "gpu", 4, 10*time.Second)
}

// holdReplicas fails if the Deployment's replicas leave want within d.
func holdReplicas(ctx context.Context, t *testing.T, s *stack.Stack, name string, want int32, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		dep, err := s.Client.AppsV1().Deployments(adapterNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *dep.Spec.Replicas != want {
			t.Fatalf("Deployment %s moved to %d replicas, want it held at %d", name, *dep.Spec.Replicas, want)
		}
	}
}

// TestAdapterQPS: changing total-qps from 800 to 1800 (single 500) moves the
// Deployment from 2 to 4 replicas (issue 4, scenario 3).
func TestAdapterQPS(t *testing.T) {
	s, _ := startAdapterStack(t, 0.5)
	ctx := testContext(t, 4*time.Minute)
	createQPSWorkload(ctx, t, s)
	list, err := externalMetric(ctx, s, names.TotalQPSMetric, "workload=web")
	if err != nil || len(list.Items) != 1 || list.Items[0].Value.Value() != 800 {
		t.Errorf("capscale-total-qps for web: %+v, %v; want one item of 800", list, err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"1800"}}}`, names.TotalQPSAnnotation)
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, s, "web", 4, time.Minute, nil, nil)
	// A bad annotation makes the metric an error naming it; the HPA holds.
	bad := fmt.Sprintf(`{"metadata":{"annotations":{%q:"zero"}}}`, names.SinglePodQPSAnnotation)
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Patch(ctx, "web", types.MergePatchType, []byte(bad), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := externalMetric(ctx, s, names.DesiredReplicasMetric, "workload=web,policy=qps")
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("a non-numeric single-pod QPS still produced a metric: %v", err)
	}
	holdReplicas(ctx, t, s, "web", 4, 6*time.Second)
}

// createQPSWorkload creates Deployment web (single-pod QPS 500, total 800)
// and an HPA on its QPS policy, and waits for the 2 replicas it asks.
func createQPSWorkload(ctx context.Context, t *testing.T, s *stack.Stack) {
	t.Helper()
	dep := SimpleDeployment(adapterNS, "web", 1, nil)
	dep.Annotations = map[string]string{names.SinglePodQPSAnnotation: "500", names.TotalQPSAnnotation: "800"}
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Create(ctx, desiredReplicasHPA("web", names.PolicyQPS, 1, 10), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, s, "web", 2, time.Minute, nil, nil)
}
