package lifecycle

import (
	"context"
	"fmt"
	"sort"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// HPAInfo describes the HorizontalPodAutoscaler that targets a workload.
type HPAInfo struct {
	Name        string `json:"name"`
	MinReplicas int32  `json:"minReplicas"`
	MaxReplicas int32  `json:"maxReplicas"`
	// CurrentReplicas and DesiredReplicas are the HPA's last status.
	CurrentReplicas int32          `json:"currentReplicas"`
	DesiredReplicas int32          `json:"desiredReplicas"`
	Conditions      []HPACondition `json:"conditions,omitempty"`
}

// HPACondition is one of the HPA's status conditions (AbleToScale,
// ScalingActive — False/ScalingDisabled at 0 replicas —, ScalingLimited).
type HPACondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Info is what the answers say of h; nil for none.
func Info(h *autoscalingv2.HorizontalPodAutoscaler) *HPAInfo {
	if h == nil {
		return nil
	}
	i := &HPAInfo{
		Name: h.Name, MinReplicas: ReplicasOf(h.Spec.MinReplicas), MaxReplicas: h.Spec.MaxReplicas,
		CurrentReplicas: h.Status.CurrentReplicas, DesiredReplicas: h.Status.DesiredReplicas,
	}
	for _, c := range h.Status.Conditions {
		i.Conditions = append(i.Conditions, HPACondition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	return i
}

// FindHPA returns the HPA whose scaleTargetRef is t, or nil. With
// several (which the HPA controller itself refuses to act on) it takes the
// first by name, so the answer is stable.
// It lists with c, the caller's client: the caller must be allowed to list
// HPAs in the namespace, and sees only what they could see themselves.
func FindHPA(ctx context.Context, c kubernetes.Interface, t Target) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	l, err := c.AutoscalingV2().HorizontalPodAutoscalers(t.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("finding the HorizontalPodAutoscaler of %s: %w", t, err)
	}
	all := make([]*autoscalingv2.HorizontalPodAutoscaler, len(l.Items))
	for i := range l.Items {
		all[i] = &l.Items[i]
	}
	return pickHPA(all, t.Kind.Kind(), t.Name), nil
}

// pickHPA returns the HPA of all whose scaleTargetRef is the apps/v1
// workload kind/name, or nil.
func pickHPA(all []*autoscalingv2.HorizontalPodAutoscaler, kind, name string) *autoscalingv2.HorizontalPodAutoscaler {
	var found []*autoscalingv2.HorizontalPodAutoscaler
	for _, h := range all {
		ref := h.Spec.ScaleTargetRef
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || ref.Kind != kind || ref.Name != name || (gv.Group != "apps" && ref.APIVersion != "") {
			continue
		}
		found = append(found, h)
	}
	if len(found) == 0 {
		return nil
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Name < found[j].Name })
	if len(found) > 1 {
		klog.InfoS("Several HorizontalPodAutoscalers target one workload; the HPA controller will not scale it", "namespace", found[0].Namespace, "kind", kind, "name", name, "count", len(found))
	}
	return found[0]
}
