package lifecycle

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/capscale/capscale/internal/names"
)

// Stopped is the outcome of a stop.
type Stopped struct {
	Namespace string `json:"namespace"`
	Resource  string `json:"resource"`
	Name      string `json:"name"`
	Replicas  int32  `json:"replicas"`
	// RememberedReplicas is what start will restore; absent when nothing is
	// remembered (the workload was already at 0 without a stop).
	RememberedReplicas *int32 `json:"rememberedReplicas,omitempty"`
	// AlreadyStopped is true when the call changed nothing.
	AlreadyStopped bool     `json:"alreadyStopped"`
	HPA            *HPAInfo `json:"hpa,omitempty"`
	Message        string   `json:"message"`
}

// Stop scales t to 0 with c, remembering its replicas in an annotation for
// Start. An HPA that would scale it back up is a *Refusal.
func Stop(ctx context.Context, c kubernetes.Interface, t Target) (Stopped, error) {
	hpa, err := FindHPA(ctx, c, t)
	if err != nil {
		return Stopped{}, err
	}
	h := boundsOf(hpa)
	if msg := stopRefusal(h, t.Kind.Kind(), t.Name); msg != "" {
		return Stopped{}, &Refusal{Reason: msg}
	}
	out := Stopped{Namespace: t.Namespace, Resource: t.Resource(), Name: t.Name, HPA: Info(hpa)}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := t.Kind.Get(ctx, c, t.Namespace, t.Name)
		if err != nil {
			return err
		}
		p := decideStop(ReplicasOf(*o.Replicas), o.Meta.Annotations, h)
		out.AlreadyStopped, out.RememberedReplicas, out.Message = p.already, p.remembered, p.message
		if p.already {
			return nil
		}
		if o.Meta.Annotations == nil {
			o.Meta.Annotations = map[string]string{}
		}
		o.Meta.Annotations[names.ReplicasBeforeStopAnnotation] = p.remember
		zero := int32(0)
		*o.Replicas = &zero
		// One Update with the read resourceVersion writes the annotation and
		// the replica count together; a concurrent change makes it Conflict
		// and the loop re-reads.
		return o.update(ctx)
	})
	if err != nil {
		return Stopped{}, fmt.Errorf("stopping %s: %w", t, err)
	}
	return out, nil
}
