package lifecycle

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/capscale/capscale/internal/names"
)

// Started is the outcome of a start.
type Started struct {
	Namespace string `json:"namespace"`
	Resource  string `json:"resource"`
	Name      string `json:"name"`
	Replicas  int32  `json:"replicas"`
	// RequestedReplicas is what was asked or remembered, before any HPA
	// cap.
	RequestedReplicas int32 `json:"requestedReplicas"`
	// Source is "body" (asked by the caller), "annotation", "current"
	// (already running) or "hpa" (nothing remembered: the HPA's
	// minReplicas).
	Source         string   `json:"source"`
	CappedByHPA    bool     `json:"cappedByHPA"`
	AlreadyRunning bool     `json:"alreadyRunning"`
	HPA            *HPAInfo `json:"hpa,omitempty"`
	Message        string   `json:"message"`
}

// Start scales t back up with c: to replicas when not nil, else to the
// count Stop remembered, else to its HPA's floor, never above the HPA's
// max. No count to start with is a *Refusal.
func Start(ctx context.Context, c kubernetes.Interface, t Target, replicas *int32) (Started, error) {
	if replicas != nil && *replicas < 1 {
		return Started{}, &Invalid{Field: "replicas", Reason: "must be at least 1 to start a workload"}
	}
	hpa, err := FindHPA(ctx, c, t)
	if err != nil {
		return Started{}, err
	}
	out := Started{Namespace: t.Namespace, Resource: t.Resource(), Name: t.Name, HPA: Info(hpa)}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := t.Kind.Get(ctx, c, t.Namespace, t.Name)
		if err != nil {
			return err
		}
		p, err := decideStart(startInput{
			current: ReplicasOf(*o.Replicas), annotations: o.Meta.Annotations, body: replicas,
			hpa: boundsOf(hpa), kind: t.Kind.Kind(), name: t.Name,
		})
		if err != nil {
			return err
		}
		out.Replicas, out.RequestedReplicas, out.Source = p.replicas, p.requested, p.source
		out.CappedByHPA, out.AlreadyRunning, out.Message = p.capped, p.alreadyRunning, p.message
		if !p.write {
			return nil
		}
		delete(o.Meta.Annotations, names.ReplicasBeforeStopAnnotation)
		n := p.replicas
		*o.Replicas = &n
		return o.update(ctx)
	})
	if err != nil {
		return Started{}, fmt.Errorf("starting %s: %w", t, err)
	}
	return out, nil
}
