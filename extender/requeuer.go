package extender

import (
	"context"
	"encoding/json"
	"errors"
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
// (burst as many), counting them in m (nil: unregistered metrics).
func NewRequeuer(w *Waiting, l *Ledger, client kubernetes.Interface, qps float64, burst int, m *Metrics) *Requeuer {
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Requeuer{waiting: w, ledger: l, client: client, limiter: rate.NewLimiter(rate.Limit(qps), burst),
		metrics: m, clock: w.clock}
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
	}
}

func (r *Requeuer) touch(ctx context.Context, p Touch) {
	if r.ledger.Settled(p.UID) {
		// Bound or binding already: its retry came first.
		r.metrics.RequeueWrites.WithLabelValues("skipped").Inc()
		return
	}
	patch, err := requeuePatch(p.UID, r.clock.Now())
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
	case apierrors.IsNotFound(err) || otherPod(err):
		// Deleted, or deleted and re-created under the same name: the pod
		// that waited is gone, and the new one is not touched.
		r.waiting.Gone(p.UID)
		r.metrics.RequeueWrites.WithLabelValues("gone").Inc()
	default:
		r.metrics.RequeueWrites.WithLabelValues("error").Inc()
		klog.ErrorS(err, "Requeueing a pod after underlay IPs were freed", "pod", klog.KRef(p.Namespace, p.Name))
	}
}

// requeuePatch is the strategic merge patch of pods/status that sets the
// FreedConditionType condition on the pod with UID uid. The UID in the
// patch is the precondition: a pod re-created under the same name has
// another UID, and the apiserver applies a patch to the object it reads in
// the same storage transaction, so changing metadata.uid fails validation
// ("field is immutable", 422 Invalid) instead of writing the condition to
// the wrong pod. The apiserver's patch handler takes no preconditions of
// its own (k8s.io/apiserver endpoints/handlers/patch.go passes none to the
// store); this one is checked by rest.BeforeUpdate against the object read
// in the update.
func requeuePatch(uid types.UID, now time.Time) ([]byte, error) {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status": map[string]any{"conditions": []map[string]any{{
			"type": FreedConditionType, "status": v1.ConditionTrue, "reason": "UnderlayIPFreed",
			// The message changes every time (the timestamps alone have
			// second precision), so that every touch is a real update.
			"message":            fmt.Sprintf("underlay IPs were freed; capscale asked kube-scheduler to retry at %s", now.UTC().Format(time.RFC3339Nano)),
			"lastTransitionTime": metav1.NewTime(now),
		}}},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the requeue patch of pod UID %s: %w", uid, err)
	}
	return patch, nil
}

// otherPod reports whether a requeue patch was refused because the pod of
// that name is another object than the one that waited: the apiserver
// rejects the change of metadata.uid as invalid.
func otherPod(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}
