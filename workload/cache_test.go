package workload

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestTrimForCache(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Annotations: map[string]string{"big": "x"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}},
		},
		Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{
			Phase:             corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c"}},
		},
	}
	out, err := TrimForCache(p)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if got.Annotations != nil || got.ManagedFields != nil || got.Status.ContainerStatuses != nil {
		t.Errorf("pod not trimmed: %+v", got)
	}
	if got.Spec.NodeName != "n1" || got.Status.Phase != corev1.PodRunning || got.Name != "p" {
		t.Errorf("trim lost what capacity needs: %+v", got)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"capscale.io/underlay-ip-capacity": "4"}}}
	if out, _ := TrimForCache(n); out.(*corev1.Node).Annotations == nil {
		t.Error("node annotations were dropped; the IP capacity lives there")
	}
	// Deletion tombstones pass through.
	if _, err := TrimForCache(cache.DeletedFinalStateUnknown{Key: "k"}); err != nil {
		t.Error(err)
	}
}
