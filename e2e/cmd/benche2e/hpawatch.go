package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/internal/kube"
)

// hpaState is what the keda scenario reads of one HPA's status.
type hpaState struct {
	Desired, Current int32
	// HasValue: the HPA has read its External metric at least once.
	HasValue bool
}

// readHPA keys an HPA by its scale target, which both sides share: KEDA
// names its HPAs keda-hpa-<ScaledObject>, the APIService side after the
// Deployment.
func readHPA(h *autoscalingv2.HorizontalPodAutoscaler) (string, hpaState) {
	st := hpaState{Desired: h.Status.DesiredReplicas, Current: h.Status.CurrentReplicas}
	for _, m := range h.Status.CurrentMetrics {
		if e := m.External; e != nil && (e.Current.AverageValue != nil || e.Current.Value != nil) {
			st.HasValue = true
		}
	}
	return h.Spec.ScaleTargetRef.Name, st
}

// hpaWatch follows every HPA of one namespace through an informer and,
// once armed, records when each first reports the desired replicas asked.
type hpaWatch struct {
	mu      sync.Mutex
	state   map[string]hpaState
	want    int32
	since   time.Time
	reached map[string]time.Duration
}

func newHPAWatch(ctx context.Context, cs kubernetes.Interface, ns string) (*hpaWatch, error) {
	w := &hpaWatch{state: map[string]hpaState{}, reached: map[string]time.Duration{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTransform(func(obj any) (any, error) {
			if m, ok := obj.(metav1.Object); ok {
				m.SetManagedFields(nil)
			}
			return obj, nil
		}))
	inf := f.Autoscaling().V2().HorizontalPodAutoscalers().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, obj any) { w.observe(obj) },
		DeleteFunc: w.forget,
	})
	if err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("the HPA informer of %s did not sync", ns)
	}
	return w, nil
}

func (w *hpaWatch) observe(obj any) {
	h, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if !ok {
		return
	}
	target, st := readHPA(h)
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state[target] = st
	if _, done := w.reached[target]; !done && w.want != 0 && st.Desired == w.want {
		w.reached[target] = now.Sub(w.since)
	}
}

func (w *hpaWatch) forget(obj any) {
	if h, ok := kube.Deleted(obj).(*autoscalingv2.HorizontalPodAutoscaler); ok {
		w.mu.Lock()
		delete(w.state, h.Spec.ScaleTargetRef.Name)
		w.mu.Unlock()
	}
}

// arm starts timing: from now on, each HPA's first status with want
// desired replicas is recorded. The caller changes the load right after.
func (w *hpaWatch) arm(want int32) {
	w.mu.Lock()
	w.want, w.since, w.reached = want, time.Now(), map[string]time.Duration{}
	w.mu.Unlock()
}

// poll calls done every 200 ms until it says true, reporting progress every
// 30 s and giving up after timeout.
func poll(ctx context.Context, what string, timeout time.Duration, done func() (bool, string)) error {
	start := time.Now()
	last := start
	for {
		ok, progress := done()
		if ok {
			return nil
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("%s: not done after %s (%s)", what, timeout, progress)
		}
		if time.Since(last) > 30*time.Second {
			fmt.Printf("# %s: %s after %.0fs\n", what, progress, time.Since(start).Seconds())
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitReached returns each HPA's time from arm to its new desired replicas
// once n HPAs have it.
func (w *hpaWatch) waitReached(ctx context.Context, n int, timeout time.Duration) ([]time.Duration, error) {
	var out []time.Duration
	err := poll(ctx, "HPAs reaching the new desired replicas", timeout, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.reached) < n {
			return false, fmt.Sprintf("%d of %d at %d", len(w.reached), n, w.want)
		}
		out = out[:0]
		for _, d := range w.reached {
			out = append(out, d)
		}
		return true, ""
	})
	return out, err
}

// waitSteady returns once n HPAs exist, have read their metric, and both
// want and run want replicas.
func (w *hpaWatch) waitSteady(ctx context.Context, n int, want int32, timeout time.Duration) error {
	return poll(ctx, "HPAs steady", timeout, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		steady := 0
		for _, st := range w.state {
			if st.HasValue && st.Desired == want && st.Current == want {
				steady++
			}
		}
		return steady >= n, fmt.Sprintf("%d of %d HPAs (%d seen) reading a value at %d replicas", steady, n, len(w.state), want)
	})
}

// waitGone returns once no HPA is left.
func (w *hpaWatch) waitGone(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, "HPAs deleted", timeout, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.state) == 0, fmt.Sprintf("%d left", len(w.state))
	})
}
