package lifecycle

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func deployment(mutate func(*appsv1.Deployment)) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 1},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
	}
	mutate(d)
	return d
}

func TestRolloutJudgement(t *testing.T) {
	progressing := func(reason string) []appsv1.DeploymentCondition {
		return []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: reason, Message: "ReplicaSet web-1 has timed out progressing."}}
	}
	tests := []struct {
		name       string
		d          *appsv1.Deployment
		complete   bool
		wantReason string
	}{
		{name: "complete", d: deployment(func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
		}), complete: true},
		{name: "stale generation", d: deployment(func(d *appsv1.Deployment) { d.Generation = 2 }), wantReason: "ObservedGenerationStale"},
		{name: "stuck", d: deployment(func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 1, Conditions: progressing("ProgressDeadlineExceeded")}
		}), wantReason: "ProgressDeadlineExceeded"},
		{name: "old replicas terminating", d: deployment(func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 2, AvailableReplicas: 2}
		}), wantReason: "Progressing"},
		{name: "updated not available", d: deployment(func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 1}
		}), wantReason: "Progressing"},
		{name: "paused", d: deployment(func(d *appsv1.Deployment) {
			d.Spec.Paused = true
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1}
		}), wantReason: "Paused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := deploymentRollout(tc.d)
			if st.Complete != tc.complete || st.Reason != tc.wantReason || st.Message == "" {
				t.Errorf("got %+v, want complete=%v reason=%q", st, tc.complete, tc.wantReason)
			}
		})
	}

	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", Generation: 3},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)},
		Status:     appsv1.StatefulSetStatus{ObservedGeneration: 3, ReadyReplicas: 3, UpdatedReplicas: 1, CurrentRevision: "a", UpdateRevision: "b"},
	}
	if st := statefulSetRollout(sts); st.Complete || st.Reason != "Progressing" {
		t.Errorf("statefulset mid-rollout: %+v", st)
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Status:     appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2, NumberReady: 2},
	}
	if st := daemonSetRollout(ds); !st.Complete {
		t.Errorf("daemonset: %+v", st)
	}
}
