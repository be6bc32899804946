package workload

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/workload/capacity"
)

// ScaleRequest is the body of PUT .../scale.
type ScaleRequest struct {
	Replicas *int32 `json:"replicas"`
	// AdjustHPA asks to move the bounds of the workload's HPA so that they
	// include Replicas; also ?adjustHPA=true.
	AdjustHPA bool `json:"adjustHPA,omitempty"`
}

// ScaleResponse is the answer to a scale.
type ScaleResponse struct {
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

func (s *Server) scale(w http.ResponseWriter, r *http.Request, t target, c caller) {
	ctx := r.Context()
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
	n := *req.Replicas
	if n < 0 {
		httpserver.WriteError(w, http.StatusUnprocessableEntity, fmt.Sprintf("replicas: Invalid value: %d: must be greater than or equal to 0", n))
		return
	}
	hpa, ok := workloadHPA(w, r, t, c)
	if !ok {
		return
	}
	if msg := scaleRefusal(boundsOf(hpa), req.AdjustHPA, t.kind.kind(), t.name, n); msg != "" {
		httpserver.WriteError(w, http.StatusConflict, msg)
		return
	}
	resp := ScaleResponse{Namespace: t.namespace, Resource: t.resource(), Name: t.name, Replicas: n}

	// Capacity first, from the API's informer caches, and never as a gate:
	// the scale goes ahead whatever it says. The caller learns how many
	// more replicas of this workload fit and what limits them (docs/workload-api.md,
	// "Trust model": "What an answer discloses").
	if o, err := t.kind.cached(s, t.namespace, t.name); err != nil {
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("capacity unknown: %v", err))
	} else if res, err := s.computeCapacity(o.template, nil); err != nil {
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("capacity unknown: %v", err))
	} else {
		resp.Capacity = &res
	}

	if hpa != nil {
		adjusted, msg, err := s.adjustHPA(ctx, c.client, t.namespace, hpa.Name, n)
		if err != nil {
			writeError(w, r, fmt.Sprintf("adjusting HorizontalPodAutoscaler %s/%s", t.namespace, hpa.Name), err)
			return
		}
		resp.HPA = hpaInfo(adjusted)
		resp.Warnings = append(resp.Warnings, msg)
	}

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// The scale subresource carries the resourceVersion: a concurrent
		// writer makes UpdateScale Conflict and the loop re-reads.
		sc, err := t.kind.getScale(ctx, c.client, t.namespace, t.name)
		if err != nil {
			return err
		}
		resp.PreviousReplicas = sc.Spec.Replicas
		sc.Spec.Replicas = n
		_, err = t.kind.updateScale(ctx, c.client, t.namespace, sc)
		return err
	})
	if err != nil {
		writeError(w, r, fmt.Sprintf("scaling %s %s/%s", t.resource(), t.namespace, t.name), err)
		return
	}
	if msg := capacityWarning(resp.Capacity, resp.PreviousReplicas, n); msg != "" {
		resp.Warnings = append(resp.Warnings, msg)
	}
	klog.FromContext(ctx).V(2).Info("Scaled workload", "from", resp.PreviousReplicas, "to", n)
	httpserver.WriteJSON(w, http.StatusOK, resp)
}

// adjustHPA widens the HPA's bounds to include n and says what it did.
func (s *Server) adjustHPA(ctx context.Context, c kubernetes.Interface, ns, name string, n int32) (*autoscalingv2.HorizontalPodAutoscaler, string, error) {
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
		DefaultUnderlayIPCapacity: s.defaultIP, Usage: usage,
	}), nil
}

// CapacityResponse is the answer of GET .../capacity.
type CapacityResponse struct {
	Namespace       string          `json:"namespace"`
	Resource        string          `json:"resource"`
	Name            string          `json:"name"`
	CurrentReplicas int32           `json:"currentReplicas"`
	Capacity        capacity.Result `json:"capacity"`
	// UsageMessage says why live usage is missing, when it is.
	UsageMessage string `json:"usageMessage,omitempty"`
}

func (s *Server) capacity(w http.ResponseWriter, r *http.Request, t target, c caller) {
	// The workload is read as the caller, who must be allowed to get it;
	// nodes and pods come from the API's caches.
	o, err := t.kind.get(r.Context(), c.client, t.namespace, t.name)
	if err != nil {
		writeError(w, r, fmt.Sprintf("reading %s %s/%s", t.resource(), t.namespace, t.name), err)
		return
	}
	resp := CapacityResponse{Namespace: t.namespace, Resource: t.resource(), Name: t.name, CurrentReplicas: replicasOf(*o.replicas)}
	usage, why := s.nodeUsage(r.Context())
	resp.UsageMessage = why
	res, err := s.computeCapacity(o.template, usage)
	if err != nil {
		httpserver.WriteError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	resp.Capacity = res
	httpserver.WriteJSON(w, http.StatusOK, resp)
}

// nodeUsage asks metrics.k8s.io for live node usage. It returns nil and the
// reason when the API is not configured, absent or failing: live usage is a
// nice-to-have and never fails the request.
func (s *Server) nodeUsage(ctx context.Context) (map[string]capacity.Usage, string) {
	if s.metrics == nil {
		return nil, "live usage unavailable: metrics.k8s.io client not configured"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	list, err := s.metrics.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Node metrics unavailable", "err", err)
		return nil, fmt.Sprintf("live usage unavailable: metrics.k8s.io: %v", err)
	}
	out := make(map[string]capacity.Usage, len(list.Items))
	for _, m := range list.Items {
		out[m.Name] = capacity.Usage{CPUMillis: m.Usage.Cpu().MilliValue(), MemoryBytes: m.Usage.Memory().Value()}
	}
	return out, ""
}
