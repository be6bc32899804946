package lifecycle

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes"
)

// RolloutStatus is how far a workload's rollout is.
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

// Rollout reads t with c and says how far its rollout is.
func Rollout(ctx context.Context, c kubernetes.Interface, t Target) (RolloutStatus, error) {
	o, err := t.Kind.Get(ctx, c, t.Namespace, t.Name)
	if err != nil {
		return RolloutStatus{}, fmt.Errorf("reading %s: %w", t, err)
	}
	st := o.rollout()
	st.Namespace, st.Resource, st.Name = t.Namespace, t.Resource(), t.Name
	return st, nil
}

// deploymentRollout judges a Deployment's rollout the way `kubectl rollout
// status` does.
func deploymentRollout(d *appsv1.Deployment) RolloutStatus {
	st := RolloutStatus{
		Generation: d.Generation, ObservedGeneration: d.Status.ObservedGeneration,
		Desired: ReplicasOf(d.Spec.Replicas), Updated: d.Status.UpdatedReplicas,
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
		Desired: ReplicasOf(o.Spec.Replicas), Updated: o.Status.UpdatedReplicas,
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
