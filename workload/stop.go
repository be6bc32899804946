package workload

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/util/retry"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/names"
)

// StopResponse is the answer to a stop.
type StopResponse struct {
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

func (s *Server) stop(w http.ResponseWriter, r *http.Request, t target, c caller) {
	ctx := r.Context()
	hpa, ok := workloadHPA(w, r, t, c)
	if !ok {
		return
	}
	h := boundsOf(hpa)
	if msg := stopRefusal(h, t.kind.kind(), t.name); msg != "" {
		httpserver.WriteError(w, http.StatusConflict, msg)
		return
	}
	resp := StopResponse{Namespace: t.namespace, Resource: t.resource(), Name: t.name, HPA: hpaInfo(hpa)}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := t.kind.get(ctx, c.client, t.namespace, t.name)
		if err != nil {
			return err
		}
		p := decideStop(replicasOf(*o.replicas), o.meta.Annotations, h)
		resp.AlreadyStopped, resp.RememberedReplicas, resp.Message = p.already, p.remembered, p.message
		if p.already {
			return nil
		}
		if o.meta.Annotations == nil {
			o.meta.Annotations = map[string]string{}
		}
		o.meta.Annotations[names.ReplicasBeforeStopAnnotation] = p.remember
		zero := int32(0)
		*o.replicas = &zero
		// One Update with the read resourceVersion writes the annotation and
		// the replica count together; a concurrent change makes it Conflict
		// and the loop re-reads.
		return o.update(ctx)
	})
	if err != nil {
		writeError(w, r, fmt.Sprintf("stopping %s %s/%s", t.resource(), t.namespace, t.name), err)
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, resp)
}
