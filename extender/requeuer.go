package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"golang.org/x/time/rate"
)

// FreedConditionType is the pod condition the requeuer sets on a pending
// pod. Any update of a pending pod makes kube-scheduler requeue a pod that
// only an extender rejected; a status condition is the narrowest write that
// does it (pods/status, nothing in spec or metadata), and it tells the pod's
// owner why the pod was retried.
const FreedConditionType = v1.PodConditionType("capscale.io/UnderlayIPFreed")

// Requeuer touches the pods Waiting names, at a bounded rate.
type Requeuer struct {
	waiting *Waiting
	ledger  *Ledger
	client  kubernetes.Interface
	limiter *rate.Limiter
	metrics *Metrics
	clock   clock.PassiveClock
}

// NewRequeuer returns a requeuer writing at most qps pod updates a second
// (burst as many).
func NewRequeuer(w *Waiting, l *Ledger, client kubernetes.Interface, qps float64, burst int) *Requeuer {
	return &Requeuer{waiting: w, ledger: l, client: client, limiter: rate.NewLimiter(rate.Limit(qps), burst),
		metrics: l.metrics, clock: w.clock}
}

// Run touches pods until ctx is done.
func (r *Requeuer) Run(ctx context.Context) {
	// The tick returns the credit of touched pods whose retry never came
	// back and forgets stale ones; wake-ups do the real work.
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.waiting.Wake():
		case <-t.C:
		}
		for _, p := range r.waiting.Next() {
			if err := r.limiter.Wait(ctx); err != nil {
				return
			}
			r.touch(ctx, p)
		}
		r.metrics.WaitingPods.Set(float64(r.waiting.Len()))
	}
}

func (r *Requeuer) touch(ctx context.Context, p Touch) {
	if r.ledger.Settled(p.UID) {
		// Bound or binding already: its retry came first.
		r.metrics.RequeueWrites.WithLabelValues("skipped").Inc()
		return
	}
	now := r.clock.Now()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": FreedConditionType, "status": v1.ConditionTrue, "reason": "UnderlayIPFreed",
		// The message changes every time (the timestamps alone have
		// second precision), so that every touch is a real update.
		"message":            fmt.Sprintf("underlay IPs were freed; capscale asked kube-scheduler to retry at %s", now.UTC().Format(time.RFC3339Nano)),
		"lastTransitionTime": metav1.NewTime(now),
	}}}})
	if err != nil {
		r.metrics.RequeueWrites.WithLabelValues("error").Inc()
		klog.ErrorS(err, "Encoding the requeue patch", "pod", klog.KRef(p.Namespace, p.Name))
		return
	}
	_, err = r.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "capscale-extender"}, "status")
	switch {
	case err == nil:
		r.metrics.RequeueWrites.WithLabelValues("requeued").Inc()
		klog.V(2).InfoS("Asked kube-scheduler to retry a pod after underlay IPs were freed", "pod", klog.KRef(p.Namespace, p.Name))
	case apierrors.IsNotFound(err):
		r.waiting.Gone(p.UID)
		r.metrics.RequeueWrites.WithLabelValues("gone").Inc()
	default:
		r.metrics.RequeueWrites.WithLabelValues("error").Inc()
		klog.ErrorS(err, "Requeueing a pod after underlay IPs were freed", "pod", klog.KRef(p.Namespace, p.Name))
	}
}
