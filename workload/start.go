package workload

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/util/retry"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/names"
)

// StartRequest is the optional body of a start.
type StartRequest struct {
	// Replicas overrides the remembered count.
	Replicas *int32 `json:"replicas,omitempty"`
}

// StartResponse is the answer to a start.
type StartResponse struct {
	Namespace string `json:"namespace"`
	Resource  string `json:"resource"`
	Name      string `json:"name"`
	Replicas  int32  `json:"replicas"`
	// RequestedReplicas is what was asked (body) or remembered, before any
	// HPA cap.
	RequestedReplicas int32 `json:"requestedReplicas"`
	// Source is "body", "annotation", "current" (already running) or "hpa"
	// (nothing remembered: the HPA's minReplicas).
	Source         string   `json:"source"`
	CappedByHPA    bool     `json:"cappedByHPA"`
	AlreadyRunning bool     `json:"alreadyRunning"`
	HPA            *HPAInfo `json:"hpa,omitempty"`
	Message        string   `json:"message"`
}

func (s *Server) start(w http.ResponseWriter, r *http.Request, t target, c caller) {
	ctx := r.Context()
	var req StartRequest
	if !decodeBody(w, r, &req, true) {
		return
	}
	if req.Replicas != nil && *req.Replicas < 1 {
		httpserver.WriteError(w, http.StatusUnprocessableEntity, "replicas: must be at least 1 to start a workload")
		return
	}
	hpa, ok := workloadHPA(w, r, t, c)
	if !ok {
		return
	}
	resp := StartResponse{Namespace: t.namespace, Resource: t.resource(), Name: t.name, HPA: hpaInfo(hpa)}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := t.kind.get(ctx, c.client, t.namespace, t.name)
		if err != nil {
			return err
		}
		p, err := decideStart(startInput{
			current: replicasOf(*o.replicas), annotations: o.meta.Annotations, body: req.Replicas,
			hpa: boundsOf(hpa), kind: t.kind.kind(), name: t.name,
		})
		if err != nil {
			return err
		}
		resp.Replicas, resp.RequestedReplicas, resp.Source = p.replicas, p.requested, p.source
		resp.CappedByHPA, resp.AlreadyRunning, resp.Message = p.capped, p.alreadyRunning, p.message
		if !p.write {
			return nil
		}
		delete(o.meta.Annotations, names.ReplicasBeforeStopAnnotation)
		n := p.replicas
		*o.replicas = &n
		return o.update(ctx)
	})
	if err != nil {
		writeError(w, r, fmt.Sprintf("starting %s %s/%s", t.resource(), t.namespace, t.name), err)
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, resp)
}
