//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	externalmetrics "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// haConfig: steps of 3 up and 4 down within [%[3]d, 14], one step per 6s, no
// scale-down while a pod is younger than 20s.
const haConfig = `sources:
- name: gpu-load
  url: %[1]s
  jsonPath: '{.data.load_balance}'
  interval: 1s
  timeout: 1s
  maxAge: 8s
  tls: {caFile: %[2]s}
stepPolicies:
- workload: {namespace: ` + adapterNS + `, kind: Deployment, name: gpu}
  source: gpu-load
  scaleUpAbove: 0.8
  scaleDownBelow: 0.5
  stepUp: 3
  stepDown: 4
  minReplicas: %[3]d
  maxReplicas: 14
  minPodAge: 20s
  interval: 6s
`

const (
	haInterval  = 6 * time.Second
	haMinPodAge = 20 * time.Second
	// The HPA's lastScaleTime and managedFields times have one-second
	// resolution, so a step may come up to 1s before interval after the
	// previous one by the test's clock.
	timeResolution = time.Second
	// endpointPropagation is how long after the dead replica's endpoint
	// turned unready the aggregator may still route to it (its informer and
	// APIService availability check catch up).
	endpointPropagation = 2 * time.Second
)

// TestAdapterHA runs two adapter replicas behind the APIService's Service
// (issue 18): a config reload reaches both; an HPA scales on the load-step
// policy while one replica is killed with SIGKILL (scaling up) and, after it
// is back, the other (scaling down); the HPA keeps getting answers through
// the survivor, and every step is exactly one policy step, never inside the
// interval and never a scale-down before minPodAge.
func TestAdapterHA(t *testing.T) {
	s, src, writeConfig := startAdapterStackWith(t, 0.65, haConfig, []any{2}, func(o *stack.Options) {
		o.AdapterReplicas = 2
		o.AdapterArgs = append(o.AdapterArgs, "--config-check-interval=1s")
	})
	ctx := testContext(t, 8*time.Minute)
	const sel = "workload=gpu,policy=load-step"

	// Both replicas answer the step rule's hold (2) for a 2-replica gpu.
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Create(ctx, SimpleDeployment(adapterNS, "gpu", 2, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEveryReplica(ctx, t, s, names.DesiredReplicasMetric, sel, "2")

	// 1. A config reload (minReplicas 2 -> 3) reaches both replicas.
	writeConfig(3)
	waitEveryReplica(ctx, t, s, names.DesiredReplicasMetric, sel, "3")

	// 2. The HPA follows the policy: clamped up to 3.
	hpa := desiredReplicasHPA("gpu", names.PolicyLoadStep, 1, 20)
	// Let the HPA take the policy's whole step down of 4.
	hpa.Spec.Behavior.ScaleDown.Policies[0].Value = 4
	if _, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, s, "gpu", 3, time.Minute, nil, nil)

	// From here on, every answer through the aggregator is recorded.
	answers := watchAnswers(ctx, t, s, names.DesiredReplicasMetric, sel)

	// 3. Scale up by 3 per interval; kill replica 0 after the first step.
	src.Set(0.93)
	up := &replicaTrace{values: []int32{3}, times: []time.Time{time.Now()}}
	upStep := func(from, to int32) bool { return to == min(from+3, 14) }
	waitReplicas(ctx, t, s, "gpu", 6, time.Minute, up, upStep)
	s.KillAdapter(0)
	killed := time.Now()
	t.Logf("killed adapter replica 0 at 6 replicas")
	waitEndpointReady(ctx, t, s, 0, false)
	unready := time.Now()
	waitReplicas(ctx, t, s, "gpu", 14, 2*time.Minute, up, upStep)
	checkGaps(t, up, haInterval)
	holdReplicas(ctx, t, s, "gpu", 14, 2*haInterval)
	answers.noErrorsBetween(t, unready.Add(endpointPropagation), time.Now(), "after replica 0's endpoint turned unready")
	t.Logf("scale-up trace %v; replica 0's endpoint unready %v after the kill", up.values, unready.Sub(killed).Round(time.Millisecond))

	// 4. Replica 0 comes back (as a new pod would); replica 1 dies while
	// the count goes down: 14 -> 10 -> 6 -> 3, first step only once every
	// pod is 20s old.
	if err := s.RestartAdapter(ctx, 0); err != nil {
		t.Fatal(err)
	}
	waitEndpointReady(ctx, t, s, 0, true)
	age, err := youngestPodAge(ctx, s, "app=gpu")
	if err != nil {
		t.Fatal(err)
	}
	newestPod := time.Now().Add(-age)
	src.Set(0.3)
	down := &replicaTrace{values: []int32{14}, times: []time.Time{time.Now()}}
	downStep := func(from, to int32) bool { return to == max(from-4, 3) }
	waitReplicas(ctx, t, s, "gpu", 10, time.Minute, down, downStep)
	if first := down.times[1].Sub(newestPod); first < haMinPodAge-timeResolution {
		t.Errorf("first scale-down %v after the newest pod was created, want at least minPodAge %v", first.Round(time.Millisecond), haMinPodAge)
	}
	s.KillAdapter(1)
	t.Logf("killed adapter replica 1 at 10 replicas")
	waitEndpointReady(ctx, t, s, 1, false)
	unready = time.Now()
	waitReplicas(ctx, t, s, "gpu", 3, 2*time.Minute, down, downStep)
	checkGaps(t, down, haInterval)
	holdReplicas(ctx, t, s, "gpu", 3, 2*haInterval)
	answers.noErrorsBetween(t, unready.Add(endpointPropagation), time.Now(), "after replica 1's endpoint turned unready")
	t.Logf("scale-down trace %v; %d answers through the aggregator, %d errors in all", down.values, answers.count(), answers.errorCount())

	// 5. Every replica down (issue 55 §1's failure matrix).
	t.Run("every replica down: HPAs hold, then scale on a sync after it is back", func(t *testing.T) {
		adapterDown(ctx, t, s)
	})
}

// hpaSync is the plane's HPA sync period (startAdapterStackWith).
const hpaSync = 2 * time.Second

// adapterDown is the metrics adapter's row of the failure matrix
// (docs/operations.md "When a part of capscale is down"): with every
// replica down, an HPA on a capscale metric keeps its replicas and says why
// (ScalingActive False, FailedGetExternalMetric) while its metric moves;
// once the replicas are back it scales to the new value on a following
// sync. The QPS policy keeps no state, so what the HPA reaches is exactly
// ceil(total/single).
func adapterDown(ctx context.Context, t *testing.T, s *stack.Stack) {
	createQPSWorkload(ctx, t, s)
	waitScalingActive(ctx, t, s, "web", "True", "")

	for i := range s.Adapters {
		s.KillAdapter(i)
	}
	for i := range s.Adapters {
		waitEndpointReady(ctx, t, s, i, false)
	}
	// 1800 QPS at 500 a pod: 4 replicas, once the HPA can read it.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"1800"}}}`, names.TotalQPSAnnotation)
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitScalingActive(ctx, t, s, "web", "False", "FailedGetExternalMetric")
	holdReplicas(ctx, t, s, "web", 2, 2*hpaSync)
	holdReplicas(ctx, t, s, "gpu", 3, hpaSync)

	start := time.Now()
	for i := range s.Adapters {
		if err := s.RestartAdapter(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	back := time.Now()
	waitReplicas(ctx, t, s, "web", 4, time.Minute, &replicaTrace{values: []int32{2}}, func(from, to int32) bool { return to == 4 })
	waitScalingActive(ctx, t, s, "web", "True", "")
	holdReplicas(ctx, t, s, "gpu", 3, hpaSync)
	t.Logf("adapter: both replicas ready %v after their restart; the HPA scaled 2 -> 4 %v after that (HPA sync %v)",
		back.Sub(start).Round(time.Millisecond), time.Since(back).Round(time.Millisecond), hpaSync)
}

// waitScalingActive waits until the HPA's ScalingActive condition has
// status (and reason, when not "").
func waitScalingActive(ctx context.Context, t *testing.T, s *stack.Stack, name, status, reason string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		hpa, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range hpa.Status.Conditions {
			if c.Type == autoscalingv2.ScalingActive {
				last = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
				return string(c.Status) == status && (reason == "" || c.Reason == reason), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("HPA %s: ScalingActive never %s %s (last %s): %v", name, status, reason, last, err)
	}
	t.Logf("HPA %s: ScalingActive %s", name, last)
}

// waitEveryReplica waits until each adapter replica, asked directly, answers
// metric{selector} with want.
func waitEveryReplica(ctx context.Context, t *testing.T, s *stack.Stack, metric, selector, want string) {
	t.Helper()
	for i, r := range s.Adapters {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			path := fmt.Sprintf("/apis/external.metrics.k8s.io/v1beta1/namespaces/%s/%s?labelSelector=%s", adapterNS, metric, url.QueryEscape(selector))
			code, body, err := adapterGetAt(ctx, s, r.URL, path, "")
			if err != nil || code != 200 {
				last = fmt.Sprintf("%d %v %s", code, err, body)
				return false, nil
			}
			var l externalmetrics.ExternalMetricValueList
			if err := json.Unmarshal([]byte(body), &l); err != nil || len(l.Items) != 1 {
				last = body
				return false, nil
			}
			last = l.Items[0].Value.String()
			return last == want, nil
		})
		if err != nil {
			t.Fatalf("adapter replica %d: %s{%s} = %s, want %s: %v", i, metric, selector, last, want, err)
		}
	}
}

func waitEndpointReady(ctx context.Context, t *testing.T, s *stack.Stack, i int, want bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ready, err := s.AdapterEndpointReady(ctx, i)
		return err == nil && ready == want, nil
	})
	if err != nil {
		t.Fatalf("adapter replica %d's endpoint never became ready=%t: %v", i, want, err)
	}
}

// checkGaps fails when two recorded steps are closer than interval; tr's
// first value is the starting count (times[0] when the trace began).
func checkGaps(t *testing.T, tr *replicaTrace, interval time.Duration) {
	t.Helper()
	for i := 2; i < len(tr.times); i++ {
		if gap := tr.times[i].Sub(tr.times[i-1]); gap < interval-timeResolution {
			t.Errorf("steps %d -> %d and %d -> %d are %v apart, want at least the %v interval (trace %v)",
				tr.values[i-2], tr.values[i-1], tr.values[i-1], tr.values[i], gap.Round(time.Millisecond), interval, tr.values)
		}
	}
}

// answerLog records every answer to one metric query through the
// aggregator, as the HPA would get it, every 200ms until the test ends.
type answerLog struct {
	mu     sync.Mutex
	at     []time.Time
	errs   []error
	errors atomic.Int64
}

func watchAnswers(ctx context.Context, t *testing.T, s *stack.Stack, metric, selector string) *answerLog {
	l := &answerLog{}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, err := externalMetric(ctx, s, metric, selector)
			if ctx.Err() != nil {
				return
			}
			l.mu.Lock()
			l.at, l.errs = append(l.at, time.Now()), append(l.errs, err)
			l.mu.Unlock()
			if err != nil {
				l.errors.Add(1)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return l
}

func (l *answerLog) noErrorsBetween(t *testing.T, from, to time.Time, what string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i, at := range l.at {
		if at.Before(from) || at.After(to) {
			continue
		}
		n++
		if l.errs[i] != nil {
			t.Errorf("%s: the aggregator answered an error at %s: %v", what, at.Format(time.StampMilli), l.errs[i])
		}
	}
	if n == 0 {
		t.Errorf("%s: no answers recorded", what)
	}
}

func (l *answerLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.at)
}

func (l *answerLog) errorCount() int64 { return l.errors.Load() }
