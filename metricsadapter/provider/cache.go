package provider

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/metricsadapter/config"
)

// The provider's informer caches hold only what it reads. A full pod is
// several KiB in memory even without managedFields; with 50,000 pods that was
// most of the adapter's 410–446 MiB (BENCHMARKS.md). Each transform below keeps
// exactly the fields the provider reads, and TestTransformsKeepWhatTheProviderReads
// pins that list.

// podInformer returns factory's pod informer, restricted to non-terminal pods
// (the load-step rule counts no others) and caching podRecords.
func podInformer(factory informers.SharedInformerFactory) (cache.SharedIndexInformer, error) {
	return kube.NonTerminalPodInformer(factory, compactObject)
}

// setTransform installs compactObject on an informer of the factory (it
// replaces the factory's managedFields transform, which it subsumes).
func setTransform(inf cache.SharedIndexInformer, what string) error {
	if err := inf.SetTransform(compactObject); err != nil {
		return fmt.Errorf("setting the %s cache transform: %w", what, err)
	}
	return nil
}

// podRecord is all the provider keeps of a pod: identity, the times the
// load-step rule reads, its phase, and the workload that owns it (computed
// once, here, instead of keeping owner references and labels).
type podRecord struct {
	metav1.TypeMeta
	// Only Name, Namespace, UID, ResourceVersion, CreationTimestamp and
	// DeletionTimestamp are set.
	metav1.ObjectMeta
	Phase corev1.PodPhase
	// Workload is the podWorkloadIndex key of the owning Deployment or
	// StatefulSet, "" when none owns it.
	Workload string
}

// DeepCopyObject makes podRecord a runtime.Object, as informer caches expect.
func (p *podRecord) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// compactPod reduces pod to its podRecord.
func compactPod(pod *corev1.Pod) *podRecord {
	return &podRecord{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			CreationTimestamp: pod.CreationTimestamp, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Phase:    pod.Status.Phase,
		Workload: podWorkload(pod),
	}
}

// asPodRecord accepts what a pod cache holds: a podRecord, or a full pod when
// the transform is not installed.
func asPodRecord(obj any) (*podRecord, bool) {
	switch p := obj.(type) {
	case *podRecord:
		return p, true
	case *corev1.Pod:
		return compactPod(p), true
	default:
		return nil, false
	}
}

// workloadMeta keeps a Deployment's or StatefulSet's identity, the QPS
// annotations (not kubectl's last-applied-configuration, often the largest
// field) and the managedFields entries that own spec.replicas, trimmed to
// their time (see replicasChangedAt).
func workloadMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}
	for _, k := range []string{names.SinglePodQPSAnnotation, names.TotalQPSAnnotation} {
		if v, ok := m.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	for _, e := range m.ManagedFields {
		if ownsSpecReplicas(e) {
			out.ManagedFields = append(out.ManagedFields, metav1.ManagedFieldsEntry{
				Manager: e.Manager, Operation: e.Operation, Subresource: e.Subresource, Time: e.Time,
				FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(specReplicasFields),
			})
		}
	}
	return out
}

// specReplicasFields is the FieldsV1 of an entry that owns spec.replicas and
// nothing else the provider needs.
const specReplicasFields = `{"f:spec":{"f:replicas":{}}}`

func compactDeployment(d *appsv1.Deployment) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: workloadMeta(&d.ObjectMeta),
		Spec:       appsv1.DeploymentSpec{Replicas: d.Spec.Replicas},
		Status:     appsv1.DeploymentStatus{ReadyReplicas: d.Status.ReadyReplicas},
	}
}

func compactStatefulSet(s *appsv1.StatefulSet) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: workloadMeta(&s.ObjectMeta),
		Spec:       appsv1.StatefulSetSpec{Replicas: s.Spec.Replicas},
		Status:     appsv1.StatefulSetStatus{ReadyReplicas: s.Status.ReadyReplicas},
	}
}

// compactHPA keeps the HPA's target and status.lastScaleTime.
func compactHPA(h *autoscalingv2.HorizontalPodAutoscaler) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: h.Name, Namespace: h.Namespace, UID: h.UID, ResourceVersion: h.ResourceVersion},
		Spec:       autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: h.Spec.ScaleTargetRef},
		Status:     autoscalingv2.HorizontalPodAutoscalerStatus{LastScaleTime: h.Status.LastScaleTime},
	}
}

// compactObject is the cache transform of every informer the provider reads.
// Other objects (deletion tombstones) pass through.
func compactObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return compactPod(o), nil
	case *appsv1.Deployment:
		return compactDeployment(o), nil
	case *appsv1.StatefulSet:
		return compactStatefulSet(o), nil
	case *autoscalingv2.HorizontalPodAutoscaler:
		return compactHPA(o), nil
	default:
		return obj, nil
	}
}

// ownsSpecReplicas reports whether a managedFields entry owns spec.replicas.
// A malformed entry owns nothing.
func ownsSpecReplicas(e metav1.ManagedFieldsEntry) bool {
	if e.FieldsV1 == nil || e.Time == nil {
		return false
	}
	var f struct {
		Spec map[string]json.RawMessage `json:"f:spec"`
	}
	if err := json.Unmarshal(e.FieldsV1.GetRawBytes(), &f); err != nil {
		return false
	}
	_, ok := f.Spec["f:replicas"]
	return ok
}

// replicasChangedAt is when spec.replicas last changed, as the apiserver
// recorded it: the newest time of the managedFields entries that own it (the
// apiserver moves an entry's time whenever its manager changes a field it
// owns, and the scale subresource records the HPA's or kubectl's writes the
// same way). It is the same for every adapter replica, however long each
// has run; zero when no entry owns the field.
func replicasChangedAt(entries []metav1.ManagedFieldsEntry) time.Time {
	var last time.Time
	for _, e := range entries {
		if ownsSpecReplicas(e) && e.Time.After(last) {
			last = e.Time.Time
		}
	}
	return last
}

// podWorkload finds a pod's workload from its controller reference: a
// StatefulSet directly, or a ReplicaSet named <deployment>-<pod-template-hash>
// (the Deployment controller's naming) for a Deployment.
func podWorkload(pod *corev1.Pod) string {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return ""
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != appsv1.GroupName {
		return ""
	}
	switch ref.Kind {
	case config.KindStatefulSet:
		return workloadIndexKey(pod.Namespace, config.KindStatefulSet, ref.Name)
	case "ReplicaSet":
		hash := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		if hash == "" || !strings.HasSuffix(ref.Name, "-"+hash) {
			return ""
		}
		return workloadIndexKey(pod.Namespace, config.KindDeployment, strings.TrimSuffix(ref.Name, "-"+hash))
	default:
		return ""
	}
}
