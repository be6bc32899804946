package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/names"
)

// RestartedAtAnnotation is the pod template annotation `kubectl rollout
// restart` sets; changing it rolls the pods.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// RestartResponse is the answer to a restart.
type RestartResponse struct {
	Namespace   string `json:"namespace"`
	Resource    string `json:"resource"`
	Name        string `json:"name"`
	RestartedAt string `json:"restartedAt"`
	// Generation is the object's generation after the restart; the rollout
	// is done when status.observedGeneration reaches it and GET .../rollout
	// says complete.
	Generation int64 `json:"generation"`
}

// restartStamp returns an RFC3339Nano time that is strictly later than any
// stamp this server handed out before, so that two restarts in the same
// second (or on a clock that did not move) still change the template.
func (s *Server) restartStamp() string {
	s.restartMu.Lock()
	defer s.restartMu.Unlock()
	t := s.clock.Now().UTC()
	if !t.After(s.lastRestart) {
		t = s.lastRestart.Add(time.Nanosecond)
	}
	s.lastRestart = t
	return t.Format(time.RFC3339Nano)
}

var errPaused = errors.New("paused")

func (s *Server) restart(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), pathOf(r)
	stamp := s.restartStamp()
	var gen int64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var (
			rv  string
			err error
		)
		// Read fresh from the API server: the paused check and the patch must
		// see the same resourceVersion.
		switch p.resource {
		case deploymentKind.resource:
			var d *appsv1.Deployment
			if d, err = s.client.AppsV1().Deployments(p.namespace).Get(ctx, p.name, metav1.GetOptions{}); err == nil {
				if d.Spec.Paused {
					return errPaused
				}
				rv = d.ResourceVersion
			}
		case statefulSetKind.resource:
			var o *appsv1.StatefulSet
			if o, err = s.client.AppsV1().StatefulSets(p.namespace).Get(ctx, p.name, metav1.GetOptions{}); err == nil {
				rv = o.ResourceVersion
			}
		case daemonSetKind.resource:
			var o *appsv1.DaemonSet
			if o, err = s.client.AppsV1().DaemonSets(p.namespace).Get(ctx, p.name, metav1.GetOptions{}); err == nil {
				rv = o.ResourceVersion
			}
		}
		if err != nil {
			return err
		}
		patch, err := restartPatch(rv, stamp)
		if err != nil {
			return err
		}
		// The resourceVersion in the patch makes the API server refuse it
		// with a Conflict if the object changed since the read, e.g. if
		// someone paused it meanwhile.
		opts := metav1.PatchOptions{FieldManager: names.FieldManager}
		switch p.resource {
		case deploymentKind.resource:
			var d *appsv1.Deployment
			if d, err = s.client.AppsV1().Deployments(p.namespace).Patch(ctx, p.name, types.StrategicMergePatchType, patch, opts); err == nil {
				gen = d.Generation
			}
		case statefulSetKind.resource:
			var o *appsv1.StatefulSet
			if o, err = s.client.AppsV1().StatefulSets(p.namespace).Patch(ctx, p.name, types.StrategicMergePatchType, patch, opts); err == nil {
				gen = o.Generation
			}
		case daemonSetKind.resource:
			var o *appsv1.DaemonSet
			if o, err = s.client.AppsV1().DaemonSets(p.namespace).Patch(ctx, p.name, types.StrategicMergePatchType, patch, opts); err == nil {
				gen = o.Generation
			}
		}
		return err
	})
	switch {
	case errors.Is(err, errPaused):
		httpserver.WriteError(w, http.StatusConflict, fmt.Sprintf("deployment %s/%s is paused; resume it (kubectl rollout resume) before restarting, a paused deployment would not roll", p.namespace, p.name))
		return
	case err != nil:
		writeAPIError(w, r, fmt.Sprintf("restarting %s %s/%s", p.resource, p.namespace, p.name), err)
		return
	}
	klog.FromContext(ctx).V(2).Info("Restarted workload", "resource", p.resource, "namespace", p.namespace, "name", p.name, "restartedAt", stamp)
	httpserver.WriteJSON(w, http.StatusAccepted, RestartResponse{
		Namespace: p.namespace, Resource: p.resource, Name: p.name, RestartedAt: stamp, Generation: gen,
	})
}

func restartPatch(resourceVersion, stamp string) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{RestartedAtAnnotation: stamp},
		}}},
	})
}

// RolloutStatus is the answer of GET .../rollout.
type RolloutStatus struct {
	Namespace          string `json:"namespace"`
	Resource           string `json:"resource"`
	Name               string `json:"name"`
	Generation         int64  `json:"generation"`
	ObservedGeneration int64  `json:"observedGeneration"`
	Desired            int32  `json:"desired"`
	Updated            int32  `json:"updated"`
	Ready              int32  `json:"ready"`
	Available          int32  `json:"available"`
	Complete           bool   `json:"complete"`
	// Reason is a CamelCase cause when not complete: ObservedGenerationStale,
	// Progressing, ProgressDeadlineExceeded, Paused, OnDeleteStrategy.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

func (s *Server) rollout(w http.ResponseWriter, r *http.Request) {
	p := pathOf(r)
	var (
		st  RolloutStatus
		err error
	)
	switch p.resource {
	case deploymentKind.resource:
		var d *appsv1.Deployment
		if d, err = s.deployments.Deployments(p.namespace).Get(p.name); err == nil {
			st = deploymentRollout(d)
		}
	case statefulSetKind.resource:
		var o *appsv1.StatefulSet
		if o, err = s.statefulsets.StatefulSets(p.namespace).Get(p.name); err == nil {
			st = statefulSetRollout(o)
		}
	case daemonSetKind.resource:
		var o *appsv1.DaemonSet
		if o, err = s.daemonsets.DaemonSets(p.namespace).Get(p.name); err == nil {
			st = daemonSetRollout(o)
		}
	}
	if err != nil {
		writeAPIError(w, r, fmt.Sprintf("reading %s %s/%s", p.resource, p.namespace, p.name), err)
		return
	}
	st.Namespace, st.Resource, st.Name = p.namespace, p.resource, p.name
	httpserver.WriteJSON(w, http.StatusOK, st)
}

func replicasOf(p *int32) int32 {
	if p == nil {
		return 1 // the API default
	}
	return *p
}

// deploymentRollout judges a Deployment's rollout the way `kubectl rollout
// status` does.
func deploymentRollout(d *appsv1.Deployment) RolloutStatus {
	st := RolloutStatus{
		Generation: d.Generation, ObservedGeneration: d.Status.ObservedGeneration,
		Desired: replicasOf(d.Spec.Replicas), Updated: d.Status.UpdatedReplicas,
		Ready: d.Status.ReadyReplicas, Available: d.Status.AvailableReplicas,
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			st.Reason, st.Message = "ProgressDeadlineExceeded", fmt.Sprintf("rollout is stuck: %s", c.Message)
			return st
		}
	}
	switch {
	case d.Generation > d.Status.ObservedGeneration:
		st.Reason, st.Message = "ObservedGenerationStale", "waiting for the deployment controller to observe the latest spec"
	case d.Spec.Paused:
		st.Reason, st.Message = "Paused", "the deployment is paused; resume it to continue the rollout"
	case st.Updated < st.Desired:
		st.Reason, st.Message = "Progressing", fmt.Sprintf("%d of %d new replicas have been updated", st.Updated, st.Desired)
	case d.Status.Replicas > st.Updated:
		st.Reason, st.Message = "Progressing", fmt.Sprintf("%d old replicas are pending termination", d.Status.Replicas-st.Updated)
	case st.Available < st.Updated:
		st.Reason, st.Message = "Progressing", fmt.Sprintf("%d of %d updated replicas are available", st.Available, st.Updated)
	default:
		st.Complete, st.Message = true, "rollout complete"
	}
	return st
}

// statefulSetRollout judges a StatefulSet's rollout the way `kubectl
// rollout status` does, partitions included.
func statefulSetRollout(o *appsv1.StatefulSet) RolloutStatus {
	st := RolloutStatus{
		Generation: o.Generation, ObservedGeneration: o.Status.ObservedGeneration,
		Desired: replicasOf(o.Spec.Replicas), Updated: o.Status.UpdatedReplicas,
		Ready: o.Status.ReadyReplicas, Available: o.Status.AvailableReplicas,
	}
	switch {
	case o.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType:
		st.Reason, st.Message = "OnDeleteStrategy", "the OnDelete update strategy rolls pods only when they are deleted; rollout status is not tracked"
	case o.Status.ObservedGeneration == 0 || o.Generation > o.Status.ObservedGeneration:
		st.Reason, st.Message = "ObservedGenerationStale", "waiting for the statefulset controller to observe the latest spec"
	case st.Ready < st.Desired:
		st.Reason, st.Message = "Progressing", fmt.Sprintf("%d of %d pods are ready", st.Ready, st.Desired)
	case o.Spec.UpdateStrategy.RollingUpdate != nil && o.Spec.UpdateStrategy.RollingUpdate.Partition != nil && *o.Spec.UpdateStrategy.RollingUpdate.Partition > 0:
		part := *o.Spec.UpdateStrategy.RollingUpdate.Partition
		if want := st.Desired - part; st.Updated < want {
			st.Reason, st.Message = "Progressing", fmt.Sprintf("partitioned rollout: %d of %d pods above partition %d updated", st.Updated, want, part)
		} else {
			st.Complete, st.Message = true, fmt.Sprintf("partitioned rollout complete: %d pods above partition %d updated", st.Updated, part)
		}
	case o.Status.UpdateRevision != o.Status.CurrentRevision:
		st.Reason, st.Message = "Progressing", fmt.Sprintf("%d of %d pods at revision %s", st.Updated, st.Desired, o.Status.UpdateRevision)
	default:
		st.Complete, st.Message = true, "rollout complete"
	}
	return st
}

// daemonSetRollout judges a DaemonSet's rollout the way `kubectl rollout
// status` does.
func daemonSetRollout(o *appsv1.DaemonSet) RolloutStatus {
	st := RolloutStatus{
		Generation: o.Generation, ObservedGeneration: o.Status.ObservedGeneration,
		Desired: o.Status.DesiredNumberScheduled, Updated: o.Status.UpdatedNumberScheduled,
		Ready: o.Status.NumberReady, Available: o.Status.NumberAvailable,
	}
	switch {
	case o.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType:
		st.Reason, st.Message = "OnDeleteStrategy", "the OnDelete update strategy rolls pods only when they are deleted; rollout status is not tracked"
	case o.Generation > o.Status.ObservedGeneration:
		st.Reason, st.Message = "ObservedGenerationStale", "waiting for the daemonset controller to observe the latest spec"
	case st.Updated < st.Desired:
		st.Reason, st.Message = "Progressing", fmt.Sprintf("%d of %d new pods have been updated", st.Updated, st.Desired)
	case st.Available < st.Desired:
		st.Reason, st.Message = "Progressing", fmt.Sprintf("%d of %d updated pods are available", st.Available, st.Desired)
	default:
		st.Complete, st.Message = true, "rollout complete"
	}
	return st
}

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

func hpaInfo(h *autoscalingv2.HorizontalPodAutoscaler) *HPAInfo {
	if h == nil {
		return nil
	}
	i := &HPAInfo{
		Name: h.Name, MinReplicas: replicasOf(h.Spec.MinReplicas), MaxReplicas: h.Spec.MaxReplicas,
		CurrentReplicas: h.Status.CurrentReplicas, DesiredReplicas: h.Status.DesiredReplicas,
	}
	for _, c := range h.Status.Conditions {
		i.Conditions = append(i.Conditions, HPACondition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	return i
}

// hpaFor returns the HPA whose scaleTargetRef is the workload, or nil. With
// several (which the HPA controller itself refuses to act on) it takes the
// first by name, so the answer is stable.
func (s *Server) hpaFor(ns string, k kind, name string) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	all, err := s.hpas.HorizontalPodAutoscalers(ns).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing HorizontalPodAutoscalers in %s: %w", ns, err)
	}
	var found []*autoscalingv2.HorizontalPodAutoscaler
	for _, h := range all {
		ref := h.Spec.ScaleTargetRef
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || ref.Kind != k.kind || ref.Name != name || (gv.Group != "apps" && ref.APIVersion != "") {
			continue
		}
		found = append(found, h)
	}
	if len(found) == 0 {
		return nil, nil
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Name < found[j].Name })
	if len(found) > 1 {
		klog.InfoS("Several HorizontalPodAutoscalers target one workload; the HPA controller will not scale it", "namespace", ns, "kind", k.kind, "name", name, "count", len(found))
	}
	return found[0], nil
}

// scaleTarget is a Deployment or StatefulSet read for a read-modify-write.
type scaleTarget struct {
	meta     *metav1.ObjectMeta
	replicas **int32
	template *corev1.PodTemplateSpec
	update   func(ctx context.Context) error
}

func (s *Server) getScaleTarget(ctx context.Context, p path) (*scaleTarget, error) {
	opts := metav1.UpdateOptions{FieldManager: names.FieldManager}
	switch p.resource {
	case deploymentKind.resource:
		c := s.client.AppsV1().Deployments(p.namespace)
		d, err := c.Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &scaleTarget{meta: &d.ObjectMeta, replicas: &d.Spec.Replicas, template: &d.Spec.Template,
			update: func(ctx context.Context) error { _, err := c.Update(ctx, d, opts); return err }}, nil
	case statefulSetKind.resource:
		c := s.client.AppsV1().StatefulSets(p.namespace)
		o, err := c.Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &scaleTarget{meta: &o.ObjectMeta, replicas: &o.Spec.Replicas, template: &o.Spec.Template,
			update: func(ctx context.Context) error { _, err := c.Update(ctx, o, opts); return err }}, nil
	}
	return nil, fmt.Errorf("resource %q cannot be scaled", p.resource)
}

func kindOf(resource string) kind {
	k, _ := lookupKind(resource, scalable)
	return k
}

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

// conflictError is a refusal to act that answers 409 with its message.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), pathOf(r)
	k := kindOf(p.resource)
	hpa, err := s.hpaFor(p.namespace, k, p.name)
	if err != nil {
		writeAPIError(w, r, "finding the workload's HPA", err)
		return
	}
	if hpa != nil && replicasOf(hpa.Spec.MinReplicas) == 0 {
		// With minReplicas 0 the HPA keeps scaling at 0 replicas and would
		// undo the stop at its next sync; refuse rather than fight it.
		httpserver.WriteError(w, http.StatusConflict, fmt.Sprintf(
			"HorizontalPodAutoscaler %s has minReplicas 0, so it stays active at 0 replicas and would scale %s %s back up; stop it by lowering the HPA's maxReplicas or deleting the HPA instead",
			hpa.Name, k.kind, p.name))
		return
	}
	resp := StopResponse{Namespace: p.namespace, Resource: p.resource, Name: p.name, HPA: hpaInfo(hpa)}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		t, err := s.getScaleTarget(ctx, p)
		if err != nil {
			return err
		}
		cur := replicasOf(*t.replicas)
		remembered, hasMemory := t.meta.Annotations[names.ReplicasBeforeStopAnnotation]
		if cur == 0 {
			// Already stopped: never overwrite what a previous stop remembered
			// with 0, and do not invent a count if nothing was remembered.
			resp.AlreadyStopped = true
			if n, err := strconv.ParseInt(remembered, 10, 32); hasMemory && err == nil && n > 0 {
				n32 := int32(n)
				resp.RememberedReplicas = &n32
				resp.Message = fmt.Sprintf("already stopped; start will restore %d replicas", n)
			} else {
				resp.Message = "already at 0 replicas with no remembered count; start needs {\"replicas\": N}"
			}
			return nil
		}
		// Running: remember the current count, even over a stale annotation
		// left by a start done outside this API; it is the count to restore.
		if t.meta.Annotations == nil {
			t.meta.Annotations = map[string]string{}
		}
		t.meta.Annotations[names.ReplicasBeforeStopAnnotation] = strconv.Itoa(int(cur))
		zero := int32(0)
		*t.replicas = &zero
		// One Update with the read resourceVersion writes the annotation and
		// the replica count together; a concurrent change makes it Conflict
		// and the loop re-reads.
		if err := t.update(ctx); err != nil {
			return err
		}
		resp.AlreadyStopped = false
		resp.RememberedReplicas = &cur
		resp.Message = fmt.Sprintf("stopped; start will restore %d replicas", cur)
		return nil
	})
	if err != nil {
		writeAPIError(w, r, fmt.Sprintf("stopping %s %s/%s", p.resource, p.namespace, p.name), err)
		return
	}
	if hpa != nil {
		resp.Message += fmt.Sprintf("; HorizontalPodAutoscaler %s sees 0 replicas and disables scaling (condition ScalingActive=False, reason ScalingDisabled) until start", hpa.Name)
	}
	httpserver.WriteJSON(w, http.StatusOK, resp)
}

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

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), pathOf(r)
	var req StartRequest
	if !decodeBody(w, r, &req, true) {
		return
	}
	if req.Replicas != nil && *req.Replicas < 1 {
		httpserver.WriteError(w, http.StatusUnprocessableEntity, "replicas: must be at least 1 to start a workload")
		return
	}
	k := kindOf(p.resource)
	hpa, err := s.hpaFor(p.namespace, k, p.name)
	if err != nil {
		writeAPIError(w, r, "finding the workload's HPA", err)
		return
	}
	resp := StartResponse{Namespace: p.namespace, Resource: p.resource, Name: p.name, HPA: hpaInfo(hpa)}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		t, err := s.getScaleTarget(ctx, p)
		if err != nil {
			return err
		}
		cur := replicasOf(*t.replicas)
		remembered, hasMemory := t.meta.Annotations[names.ReplicasBeforeStopAnnotation]
		var target int32
		switch {
		case req.Replicas != nil:
			target, resp.Source = *req.Replicas, "body"
		case hasMemory:
			n, perr := strconv.ParseInt(remembered, 10, 32)
			if perr != nil || n < 1 {
				if cur > 0 {
					target, resp.Source = cur, "current"
					break
				}
				return &conflictError{fmt.Sprintf("annotation %s=%q is not a replica count; start with {\"replicas\": N}", names.ReplicasBeforeStopAnnotation, remembered)}
			}
			target, resp.Source = int32(n), "annotation"
			if cur > 0 {
				// Started outside this API: the remembered count is stale and
				// the current one wins.
				target, resp.Source = cur, "current"
			}
		case cur > 0:
			resp.AlreadyRunning, resp.Source = true, "current"
			resp.Replicas, resp.RequestedReplicas = cur, cur
			resp.Message = fmt.Sprintf("already running with %d replicas", cur)
			return nil
		case hpa != nil:
			// Scaled to 0 outside this API while an HPA manages it: the HPA's
			// own floor is the count its owner asked for.
			target, resp.Source = max(replicasOf(hpa.Spec.MinReplicas), 1), "hpa"
		default:
			return &conflictError{fmt.Sprintf("%s %s is at 0 replicas and no count was remembered (no %s annotation); start with {\"replicas\": N}", k.kind, p.name, names.ReplicasBeforeStopAnnotation)}
		}
		resp.RequestedReplicas = target
		resp.CappedByHPA = false
		if hpa != nil && target > hpa.Spec.MaxReplicas {
			target, resp.CappedByHPA = hpa.Spec.MaxReplicas, true
		}
		delete(t.meta.Annotations, names.ReplicasBeforeStopAnnotation)
		*t.replicas = &target
		if err := t.update(ctx); err != nil {
			return err
		}
		resp.Replicas = target
		resp.AlreadyRunning = target == cur && !hasMemory
		resp.Message = fmt.Sprintf("started with %d replicas", target)
		return nil
	})
	var ce *conflictError
	switch {
	case errors.As(err, &ce):
		httpserver.WriteError(w, http.StatusConflict, ce.msg)
		return
	case err != nil:
		writeAPIError(w, r, fmt.Sprintf("starting %s %s/%s", p.resource, p.namespace, p.name), err)
		return
	}
	if hpa != nil && !resp.AlreadyRunning {
		if resp.CappedByHPA {
			resp.Message += fmt.Sprintf(" instead of %d: HorizontalPodAutoscaler %s allows at most %d", resp.RequestedReplicas, hpa.Name, hpa.Spec.MaxReplicas)
		}
		if minR := replicasOf(hpa.Spec.MinReplicas); resp.Replicas < minR {
			resp.Message += fmt.Sprintf("; HorizontalPodAutoscaler %s will raise it to its minReplicas %d", hpa.Name, minR)
		}
		resp.Message += fmt.Sprintf("; HorizontalPodAutoscaler %s resumes scaling (ScalingDisabled ends) and may move it within %d..%d", hpa.Name, replicasOf(hpa.Spec.MinReplicas), hpa.Spec.MaxReplicas)
	}
	httpserver.WriteJSON(w, http.StatusOK, resp)
}

// isNotFound reports a lister or API NotFound.
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
