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
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/workload/auth"
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

func (s *Server) scale(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), pathOf(r)
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
	k := kindOf(p.resource)
	hpa, err := s.hpaFor(p.namespace, k, p.name)
	if err != nil {
		writeAPIError(w, r, "finding the workload's HPA", err)
		return
	}
	resp := ScaleResponse{Namespace: p.namespace, Resource: p.resource, Name: p.name, Replicas: n}
	if hpa != nil {
		if !req.AdjustHPA {
			httpserver.WriteError(w, http.StatusConflict, fmt.Sprintf(
				"%s %s is managed by HorizontalPodAutoscaler %s (replicas %d..%d), which would undo a direct scale at its next sync; ask with ?adjustHPA=true (or \"adjustHPA\": true) to move the HPA's bounds to include %d",
				k.kind, p.name, hpa.Name, replicasOf(hpa.Spec.MinReplicas), hpa.Spec.MaxReplicas, n))
			return
		}
		// Moving the HPA is a write of its own: the caller must be allowed it.
		u := auth.UserFrom(ctx)
		if code, msg := s.reviewer.Check(ctx, u, auth.Attributes{
			Verb: "update", Group: "autoscaling", Resource: "horizontalpodautoscalers", Namespace: p.namespace, Name: hpa.Name,
		}); code != http.StatusOK {
			httpserver.WriteError(w, code, msg)
			return
		}
	}

	// Capacity first, from the informer caches, and never as a gate: the
	// scale goes ahead whatever it says.
	if t, _, err := s.templateOf(p); err != nil {
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("capacity unknown: %v", err))
	} else {
		res, err := s.computeCapacity(t, nil)
		if err != nil {
			resp.Warnings = append(resp.Warnings, fmt.Sprintf("capacity unknown: %v", err))
		} else {
			resp.Capacity = &res
		}
	}

	if hpa != nil {
		adjusted, msg, err := s.adjustHPA(ctx, p.namespace, hpa.Name, n)
		if err != nil {
			writeAPIError(w, r, fmt.Sprintf("adjusting HorizontalPodAutoscaler %s/%s", p.namespace, hpa.Name), err)
			return
		}
		resp.HPA = hpaInfo(adjusted)
		resp.Warnings = append(resp.Warnings, msg)
	}

	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// The scale subresource carries the resourceVersion: a concurrent
		// writer makes UpdateScale Conflict and the loop re-reads.
		var err error
		switch p.resource {
		case deploymentKind.resource:
			c := s.client.AppsV1().Deployments(p.namespace)
			sc, gerr := c.GetScale(ctx, p.name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			resp.PreviousReplicas = sc.Spec.Replicas
			sc.Spec.Replicas = n
			_, err = c.UpdateScale(ctx, p.name, sc, metav1.UpdateOptions{FieldManager: names.FieldManager})
		case statefulSetKind.resource:
			c := s.client.AppsV1().StatefulSets(p.namespace)
			sc, gerr := c.GetScale(ctx, p.name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			resp.PreviousReplicas = sc.Spec.Replicas
			sc.Spec.Replicas = n
			_, err = c.UpdateScale(ctx, p.name, sc, metav1.UpdateOptions{FieldManager: names.FieldManager})
		}
		return err
	})
	if err != nil {
		writeAPIError(w, r, fmt.Sprintf("scaling %s %s/%s", p.resource, p.namespace, p.name), err)
		return
	}
	if c := resp.Capacity; c != nil {
		if more := int64(n) - int64(resp.PreviousReplicas); more > c.Replicas {
			resp.Warnings = append(resp.Warnings, fmt.Sprintf(
				"scaled anyway: %d more replicas were asked but only %d fit (%s); %d will stay Pending until capacity frees up",
				more, c.Replicas, limitingName(c), more-c.Replicas))
		}
	}
	klog.FromContext(ctx).V(2).Info("Scaled workload", "resource", p.resource, "namespace", p.namespace, "name", p.name, "from", resp.PreviousReplicas, "to", n)
	httpserver.WriteJSON(w, http.StatusOK, resp)
}

func limitingName(c *capacity.Result) string {
	if c.LimitingResource == "" {
		return "no node is eligible"
	}
	return "limited by " + string(c.LimitingResource)
}

// adjustHPA widens the HPA's bounds to include n and says what it did. At
// n = 0 the bounds stay: the HPA disables itself at 0 replicas.
func (s *Server) adjustHPA(ctx context.Context, ns, name string, n int32) (*autoscalingv2.HorizontalPodAutoscaler, string, error) {
	var (
		out *autoscalingv2.HorizontalPodAutoscaler
		msg string
	)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		h, err := s.client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		minR, maxR := replicasOf(h.Spec.MinReplicas), h.Spec.MaxReplicas
		switch {
		case n == 0:
			out, msg = h, fmt.Sprintf("HorizontalPodAutoscaler %s left at %d..%d: at 0 replicas it disables scaling (ScalingDisabled) until the workload is scaled up again", name, minR, maxR)
			return nil
		case n > maxR:
			h.Spec.MaxReplicas = n
		case n < minR:
			h.Spec.MinReplicas = &n
		default:
			out, msg = h, fmt.Sprintf("HorizontalPodAutoscaler %s bounds %d..%d already include %d; it may move the workload away from it at its next sync", name, minR, maxR, n)
			return nil
		}
		u, err := s.client.AutoscalingV2().HorizontalPodAutoscalers(ns).Update(ctx, h, metav1.UpdateOptions{FieldManager: names.FieldManager})
		if err != nil {
			return err
		}
		out, msg = u, fmt.Sprintf("HorizontalPodAutoscaler %s bounds moved from %d..%d to %d..%d; it may move the workload within them at its next sync",
			name, minR, maxR, replicasOf(u.Spec.MinReplicas), u.Spec.MaxReplicas)
		return nil
	})
	return out, msg, err
}

// templateOf reads a scalable workload's pod template and desired replicas
// from the cache.
func (s *Server) templateOf(p path) (*corev1.PodTemplateSpec, int32, error) {
	switch p.resource {
	case deploymentKind.resource:
		d, err := s.deployments.Deployments(p.namespace).Get(p.name)
		if err != nil {
			return nil, 0, err
		}
		return &d.Spec.Template, replicasOf(d.Spec.Replicas), nil
	case statefulSetKind.resource:
		o, err := s.statefulsets.StatefulSets(p.namespace).Get(p.name)
		if err != nil {
			return nil, 0, err
		}
		return &o.Spec.Template, replicasOf(o.Spec.Replicas), nil
	}
	return nil, 0, fmt.Errorf("resource %q has no pod template to place", p.resource)
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

func (s *Server) capacity(w http.ResponseWriter, r *http.Request) {
	p := pathOf(r)
	t, cur, err := s.templateOf(p)
	if err != nil {
		writeAPIError(w, r, fmt.Sprintf("reading %s %s/%s", p.resource, p.namespace, p.name), err)
		return
	}
	resp := CapacityResponse{Namespace: p.namespace, Resource: p.resource, Name: p.name, CurrentReplicas: cur}
	usage, why := s.nodeUsage(r.Context())
	resp.UsageMessage = why
	res, err := s.computeCapacity(t, usage)
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
