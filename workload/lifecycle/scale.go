package lifecycle

import (
	"context"
	"fmt"
	"math"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/workload/capacity"
)

// Scaled is the outcome of a scale.
type Scaled struct {
	Namespace        string `json:"namespace"`
	Resource         string `json:"resource"`
	Name             string `json:"name"`
	Replicas         int32  `json:"replicas"`
	PreviousReplicas int32  `json:"previousReplicas"`
	// Capacity is computed before scaling; nil when it could not be.
	Capacity *capacity.Result `json:"capacity,omitempty"`
	// HPA is the workload's HPA after any bound adjustment.
	HPA      *HPAInfo `json:"hpa,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// ScaleOptions are a scale's choices besides the count.
type ScaleOptions struct {
	// AdjustHPA moves the bounds of the workload's HPA to include the new
	// count; without it an HPA makes the scale a *Refusal.
	AdjustHPA bool
	// Capacity, if not nil, computes how many more replicas of t fit. It
	// informs, never gates: a failure is a warning.
	Capacity func(ctx context.Context) (capacity.Result, error)
}

// Scale sets t's replicas to n with c through the scale subresource.
func Scale(ctx context.Context, c kubernetes.Interface, t Target, n int32, o ScaleOptions) (Scaled, error) {
	if n < 0 {
		return Scaled{}, &Invalid{Field: "replicas", Reason: fmt.Sprintf("Invalid value: %d: must be greater than or equal to 0", n)}
	}
	hpa, err := FindHPA(ctx, c, t)
	if err != nil {
		return Scaled{}, err
	}
	if msg := scaleRefusal(boundsOf(hpa), o.AdjustHPA, t.Kind.Kind(), t.Name, n); msg != "" {
		return Scaled{}, &Refusal{Reason: msg, Remedy: RemedyAdjustHPA}
	}
	out := Scaled{Namespace: t.Namespace, Resource: t.Resource(), Name: t.Name, Replicas: n}
	if o.Capacity != nil {
		if res, err := o.Capacity(ctx); err != nil {
			out.Warnings = append(out.Warnings, fmt.Sprintf("capacity unknown: %v", err))
		} else {
			out.Capacity = &res
		}
	}
	if hpa != nil {
		adjusted, msg, err := adjustHPA(ctx, c, t.Namespace, hpa.Name, n)
		if err != nil {
			return Scaled{}, fmt.Errorf("adjusting HorizontalPodAutoscaler %s/%s: %w", t.Namespace, hpa.Name, err)
		}
		out.HPA = Info(adjusted)
		out.Warnings = append(out.Warnings, msg)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// The scale subresource carries the resourceVersion: a concurrent
		// writer makes UpdateScale Conflict and the loop re-reads.
		sc, err := t.Kind.getScale(ctx, c, t.Namespace, t.Name)
		if err != nil {
			return err
		}
		out.PreviousReplicas = sc.Spec.Replicas
		sc.Spec.Replicas = n
		_, err = t.Kind.updateScale(ctx, c, t.Namespace, sc)
		return err
	})
	if err != nil {
		return Scaled{}, fmt.Errorf("scaling %s: %w", t, err)
	}
	if msg := capacityWarning(out.Capacity, out.PreviousReplicas, n); msg != "" {
		out.Warnings = append(out.Warnings, msg)
	}
	return out, nil
}

// Max scales t to the computed maximum: its current replicas plus the
// replicas o.Capacity says still fit, which it needs. A concurrent scale
// between the read and the write is overwritten, as with any scale.
func Max(ctx context.Context, c kubernetes.Interface, t Target, o ScaleOptions) (Scaled, error) {
	if o.Capacity == nil {
		return Scaled{}, fmt.Errorf("scaling %s to its maximum: no capacity computation", t)
	}
	res, err := o.Capacity(ctx)
	if err != nil {
		return Scaled{}, fmt.Errorf("computing the maximum of %s: %w", t, err)
	}
	sc, err := t.Kind.getScale(ctx, c, t.Namespace, t.Name)
	if err != nil {
		return Scaled{}, fmt.Errorf("reading the scale of %s: %w", t, err)
	}
	o.Capacity = func(context.Context) (capacity.Result, error) { return res, nil }
	return Scale(ctx, c, t, MaxReplicas(sc.Spec.Replicas, res), o)
}

// MaxReplicas is the computed maximum of a workload at current replicas:
// those plus every replica that still fits, within int32.
func MaxReplicas(current int32, res capacity.Result) int32 {
	return int32(min(int64(current)+max(res.Replicas, 0), math.MaxInt32))
}

// adjustHPA widens the HPA's bounds to include n and says what it did.
func adjustHPA(ctx context.Context, c kubernetes.Interface, ns, name string, n int32) (*autoscalingv2.HorizontalPodAutoscaler, string, error) {
	var (
		out *autoscalingv2.HorizontalPodAutoscaler
		msg string
	)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		h, err := c.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		before := *boundsOf(h)
		ch := decideHPABounds(before, n)
		if !ch.changed {
			out, msg = h, ch.message
			return nil
		}
		h.Spec.MinReplicas, h.Spec.MaxReplicas = &ch.min, ch.max
		u, err := c.AutoscalingV2().HorizontalPodAutoscalers(ns).Update(ctx, h, metav1.UpdateOptions{FieldManager: names.FieldManager})
		if err != nil {
			return err
		}
		out, msg = u, movedMessage(before, *boundsOf(u))
		return nil
	})
	return out, msg, err
}
