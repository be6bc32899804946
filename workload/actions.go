package workload

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/workload/capacity"
	"github.com/capscale/capscale/workload/lifecycle"
)

// The answers are lifecycle's outcomes, under the names the API's OpenAPI
// document gives them.
type (
	RestartResponse = lifecycle.Restarted
	StopResponse    = lifecycle.Stopped
	StartResponse   = lifecycle.Started
	ScaleResponse   = lifecycle.Scaled
	RolloutStatus   = lifecycle.RolloutStatus
	HPAInfo         = lifecycle.HPAInfo
)

// RestartedAtAnnotation is the pod template annotation a restart sets.
const RestartedAtAnnotation = lifecycle.RestartedAtAnnotation

// StartRequest is the optional body of a start.
type StartRequest struct {
	// Replicas overrides the remembered count.
	Replicas *int32 `json:"replicas,omitempty"`
}

// ScaleRequest is the body of PUT .../scale.
type ScaleRequest struct {
	Replicas *int32 `json:"replicas"`
	// AdjustHPA asks to move the bounds of the workload's HPA so that they
	// include Replicas; also ?adjustHPA=true.
	AdjustHPA bool `json:"adjustHPA,omitempty"`
}

// The handlers below decode, call lifecycle with the caller's client, and
// encode: what happens to a workload is lifecycle's, the same for
// kubectl-capscale.

// answer writes a lifecycle outcome with code, or its error.
func answer[T any](w http.ResponseWriter, r *http.Request, code int, out T, err error) {
	if err != nil {
		writeError(w, r, err)
		return
	}
	httpserver.WriteJSON(w, code, out)
}

func (s *Server) restart(w http.ResponseWriter, r *http.Request, t target, c caller) {
	out, err := lifecycle.Restart(r.Context(), c.client, t.Target, s.stamps.Next())
	if err == nil {
		klog.FromContext(r.Context()).V(2).Info("Restarted workload", "restartedAt", out.RestartedAt)
	}
	answer(w, r, http.StatusAccepted, out, err)
}

func (s *Server) rollout(w http.ResponseWriter, r *http.Request, t target, c caller) {
	// Read as the caller: the answer shows only what they may get.
	out, err := lifecycle.Rollout(r.Context(), c.client, t.Target)
	answer(w, r, http.StatusOK, out, err)
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request, t target, c caller) {
	out, err := lifecycle.Stop(r.Context(), c.client, t.Target)
	answer(w, r, http.StatusOK, out, err)
}

func (s *Server) start(w http.ResponseWriter, r *http.Request, t target, c caller) {
	var req StartRequest
	if !decodeBody(w, r, &req, true) {
		return
	}
	out, err := lifecycle.Start(r.Context(), c.client, t.Target, req.Replicas)
	answer(w, r, http.StatusOK, out, err)
}

func (s *Server) scale(w http.ResponseWriter, r *http.Request, t target, c caller) {
	var req ScaleRequest
	if !decodeBody(w, r, &req, false) {
		return
	}
	if v := r.URL.Query().Get("adjustHPA"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			httpserver.WriteError(w, http.StatusBadRequest, fmt.Sprintf("query parameter adjustHPA=%q is not a boolean", v))
			return
		}
		req.AdjustHPA = req.AdjustHPA || b
	}
	if req.Replicas == nil {
		httpserver.WriteError(w, http.StatusUnprocessableEntity, "replicas: Required value")
		return
	}
	// Capacity comes from the API's informer caches, and never gates: the
	// caller learns how many more replicas of this workload fit and what
	// limits them (docs/workload-api.md, "What an answer discloses").
	out, err := lifecycle.Scale(r.Context(), c.client, t.Target, *req.Replicas, lifecycle.ScaleOptions{
		AdjustHPA: req.AdjustHPA,
		Capacity:  func(context.Context) (capacity.Result, error) { return s.cachedCapacity(t.Target) },
	})
	if err == nil {
		klog.FromContext(r.Context()).V(2).Info("Scaled workload", "from", out.PreviousReplicas, "to", out.Replicas)
	}
	answer(w, r, http.StatusOK, out, err)
}

// cachedCapacity computes how many more replicas of t fit, reading t's pod
// template from the API's informers.
func (s *Server) cachedCapacity(t lifecycle.Target) (capacity.Result, error) {
	var obj any
	var err error
	switch t.Kind {
	case lifecycle.Deployments:
		obj, err = s.deployments.Deployments(t.Namespace).Get(t.Name)
	case lifecycle.StatefulSets:
		obj, err = s.statefulsets.StatefulSets(t.Namespace).Get(t.Name)
	default:
		err = fmt.Errorf("the API does not cache %s", t.Resource())
	}
	if err != nil {
		return capacity.Result{}, err
	}
	o, err := t.Kind.View(obj)
	if err != nil {
		return capacity.Result{}, err
	}
	return s.computeCapacity(o.Template, nil)
}

// computeCapacity runs the calculator over the cached nodes and pods.
func (s *Server) computeCapacity(t *corev1.PodTemplateSpec, usage map[string]capacity.Usage) (capacity.Result, error) {
	if !s.HasSynced() {
		return capacity.Result{}, fmt.Errorf("informer caches are not synced yet")
	}
	nodes, err := s.nodes.List(labels.Everything())
	if err != nil {
		return capacity.Result{}, fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := s.pods.List(labels.Everything())
	if err != nil {
		return capacity.Result{}, fmt.Errorf("listing pods: %w", err)
	}
	return capacity.Compute(capacity.Input{
		Template: *t, Nodes: nodes, Pods: pods,
		DefaultUnderlayIPCapacity: s.defaultIP, AwaitCapacitySource: s.awaitIP, Usage: usage,
	}), nil
}
