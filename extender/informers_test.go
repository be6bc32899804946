package extender

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestStripPod(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	now := metav1.Now()
	full := pod("p", "a", 2)
	full.Labels = map[string]string{"app": "x"}
	full.Annotations = map[string]string{"big": "annotation"}
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	full.DeletionTimestamp = &now
	full.Spec.Containers[0].Image = "registry.example.com/app:v1"
	full.Spec.Containers[0].Env = []v1.EnvVar{{Name: "A", Value: "B"}}
	full.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
	full.Spec.InitContainers = []v1.Container{{Name: "sidecar", RestartPolicy: &always, Resources: v1.ResourceRequirements{
		Limits: v1.ResourceList{underlayResource: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")}}}}
	full.Spec.Overhead = v1.ResourceList{underlayResource: resource.MustParse("1"), v1.ResourceCPU: resource.MustParse("100m")}
	full.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady}}

	obj, err := StripPod(full)
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*v1.Pod)
	if got.Name != "p" || got.Namespace != "ns" || got.UID != full.UID || got.Spec.NodeName != "a" ||
		got.Status.Phase != v1.PodRunning || got.DeletionTimestamp == nil {
		t.Errorf("identity, node or phase lost: %+v", got)
	}
	if got.Labels != nil || got.Annotations != nil || got.ManagedFields != nil || got.Status.Conditions != nil ||
		got.Spec.Containers[0].Image != "" || got.Spec.Containers[0].Env != nil {
		t.Errorf("kept more than needed: %+v", got)
	}
	if _, ok := got.Spec.Overhead[v1.ResourceCPU]; ok {
		t.Errorf("kept other resources: %v", got.Spec.Overhead)
	}
	if PodNeed(got) != PodNeed(full) || PodNeed(full) != 4 {
		t.Errorf("PodNeed changed: %d stripped, %d full", PodNeed(got), PodNeed(full))
	}
	if full.Labels == nil {
		t.Error("the input was modified")
	}

	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: full}
	if obj, err := StripPod(tomb); err != nil || obj != any(tomb) {
		t.Errorf("non-pods must pass through: %v %v", obj, err)
	}
}

func TestPodInformerCachesStrippedPods(t *testing.T) {
	p := pod("p", "a", 1)
	p.Labels = map[string]string{"app": "x"}
	env := newInformerEnv(t, node("a", ""), p)
	got, err := env.binder.pods.Pods("ns").Get("p")
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels != nil || PodNeed(got) != 1 {
		t.Errorf("cached pod not stripped or need lost: %+v", got)
	}
}
