package workload

import (
	"context"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/workload/capacity"
	"github.com/capscale/capscale/workload/lifecycle"
)

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
	o, err := t.Kind.Get(r.Context(), c.client, t.Namespace, t.Name)
	if err != nil {
		writeError(w, r, fmt.Errorf("reading %s: %w", t, err))
		return
	}
	resp := CapacityResponse{Namespace: t.Namespace, Resource: t.Resource(), Name: t.Name, CurrentReplicas: lifecycle.ReplicasOf(*o.Replicas)}
	usage, why := s.nodeUsage(r.Context())
	resp.UsageMessage = why
	res, err := s.computeCapacity(o.Template, usage)
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
