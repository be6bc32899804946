package provider

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
	"sigs.k8s.io/randfill"

	"github.com/capscale/capscale/internal/names"
)

// filled returns obj's type filled with random values in every field (no
// nils, no empty maps or slices), so that a transform that keeps a field
// shows it.
func filled[T any](seed int64) *T {
	var v T
	randfill.NewWithSeed(seed).NilChance(0).NumElements(1, 2).Funcs(
		// randfill leaves times (unexported fields) and may leave strings empty.
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.NewTime(now.Add(-time.Duration(c.Intn(1000)) * time.Second))
		},
		func(s *string, c randfill.Continue) { *s = "s" + c.String(8) },
	).Fill(&v)
	return &v
}

// setPaths lists the non-zero leaves of v: struct fields are walked, and
// pointers, maps, slices, times and scalars are leaves.
func setPaths(v reflect.Value, prefix string) []string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct && v.Type() != reflect.TypeOf(metav1.Time{}) && v.Type() != reflect.TypeOf(time.Time{}) {
		var out []string
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			name := f.Name
			if prefix != "" {
				name = prefix + "." + name
			}
			out = append(out, setPaths(v.Field(i), name)...)
		}
		return out
	}
	if v.IsZero() || ((v.Kind() == reflect.Map || v.Kind() == reflect.Slice) && v.Len() == 0) {
		return nil
	}
	return []string{prefix}
}

// TestTransformsKeepWhatTheProviderReads pins the fields each cache record
// keeps: exactly what the provider reads. Widening a record (or reading a
// field the transform drops) must be a deliberate change of this list.
func TestTransformsKeepWhatTheProviderReads(t *testing.T) {
	identity := []string{"ObjectMeta.Name", "ObjectMeta.Namespace", "ObjectMeta.UID", "ObjectMeta.ResourceVersion"}
	workload := append(slices.Clone(identity), "ObjectMeta.Annotations", "ObjectMeta.ManagedFields")
	tests := []struct {
		name string
		in   runtime.Object
		want []string
	}{
		{name: "pod", in: richPod(1),
			want: append(slices.Clone(identity), "ObjectMeta.CreationTimestamp", "ObjectMeta.DeletionTimestamp", "Phase", "Workload")},
		{name: "deployment", in: richDeployment(2), want: append(slices.Clone(workload), "Spec.Replicas", "Status.ReadyReplicas")},
		{name: "statefulset", in: richStatefulSet(3), want: append(slices.Clone(workload), "Spec.Replicas", "Status.ReadyReplicas")},
		{name: "hpa", in: filled[autoscalingv2.HorizontalPodAutoscaler](4),
			want: append(slices.Clone(identity), "Spec.ScaleTargetRef.Kind", "Spec.ScaleTargetRef.Name", "Spec.ScaleTargetRef.APIVersion", "Status.LastScaleTime")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := compactObject(tc.in.DeepCopyObject())
			if err != nil {
				t.Fatal(err)
			}
			got := setPaths(reflect.ValueOf(out), "")
			slices.Sort(got)
			slices.Sort(tc.want)
			if !slices.Equal(got, tc.want) {
				t.Errorf("kept fields\n got %v\nwant %v", got, tc.want)
			}
		})
	}

	// Within the kept maps and lists: only the QPS annotations, and only the
	// managedFields entries that own spec.replicas, with their times.
	d := compactDeployment(richDeployment(5))
	if len(d.Annotations) != 2 || d.Annotations[names.TotalQPSAnnotation] != "800" || d.Annotations[names.SinglePodQPSAnnotation] != "500" {
		t.Errorf("annotations = %v, want only the two QPS annotations", d.Annotations)
	}
	if len(d.ManagedFields) != 2 || !replicasChangedAt(d.ManagedFields).Equal(now.Add(-time.Minute)) {
		t.Errorf("managedFields = %+v, want the two entries that own spec.replicas, the newer a minute old", d.ManagedFields)
	}
	if p := compactPod(richPod(6)); p.Workload != workloadIndexKey("ai", "Deployment", "gpu") {
		t.Errorf("pod workload = %q, want the Deployment gpu", p.Workload)
	}
}

// richDeployment is the Deployment ai/gpu (4 replicas, 3 ready) with every
// other field random: kubectl's last-applied-configuration, managedFields of
// several managers, a template.
func richDeployment(seed int64) *appsv1.Deployment {
	d := filled[appsv1.Deployment](seed)
	d.Namespace, d.Name, d.DeletionTimestamp = "ai", "gpu", nil
	d.Spec.Replicas = int32p(4)
	d.Status.ReadyReplicas = 3
	d.Annotations = qpsAnn("800", "500")
	d.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = strings.Repeat("x", 4096)
	d.ManagedFields = workloadManagedFields()
	return d
}

func richStatefulSet(seed int64) *appsv1.StatefulSet {
	s := filled[appsv1.StatefulSet](seed)
	s.Namespace, s.Name, s.DeletionTimestamp = "ai", "db", nil
	s.Spec.Replicas = int32p(4)
	s.Status.ReadyReplicas = 4
	s.Annotations = qpsAnn("250", "100")
	s.ManagedFields = workloadManagedFields()
	return s
}

// workloadManagedFields: the creator owned spec.replicas an hour ago (shared
// ownership), the HPA took it over a minute ago via the scale subresource,
// and the controller owns status (which has a replicas field too).
func workloadManagedFields() []metav1.ManagedFieldsEntry {
	hpa := replicasOwner("kube-controller-manager", now.Add(-time.Minute))
	hpa.Subresource = "scale"
	hpa.FieldsV1 = metav1.NewFieldsV1(`{"f:spec":{"f:replicas":{}}}`)
	status := replicasOwner("kube-controller-manager", now)
	status.Subresource = "status"
	status.FieldsV1 = metav1.NewFieldsV1(`{"f:status":{"f:replicas":{},"f:readyReplicas":{}}}`)
	other := replicasOwner("kubectl-edit", now)
	other.FieldsV1 = metav1.NewFieldsV1(`{"f:spec":{"f:template":{"f:spec":{"f:replicas":{}}}}}`)
	broken := replicasOwner("broken", now)
	broken.FieldsV1 = metav1.NewFieldsV1(`{"f:spec":`)
	return []metav1.ManagedFieldsEntry{replicasOwner("creator", now.Add(-time.Hour)), hpa, status, other, broken}
}

// richPod is a live pod of Deployment ai/gpu, created a minute ago, with
// every other field random.
func richPod(seed int64) *corev1.Pod {
	p := filled[corev1.Pod](seed)
	base := pod("ai", "gpu", p.Name, time.Minute)
	p.Namespace, p.CreationTimestamp, p.OwnerReferences = base.Namespace, base.CreationTimestamp, base.OwnerReferences
	p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "h1"
	p.Status.Phase = corev1.PodRunning
	return p
}

// noise gives obj random values in every field the provider does not read,
// keeping the ones it does (those the scenario set).
func noise(obj runtime.Object, seed int64) runtime.Object {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		n := filled[appsv1.Deployment](seed)
		n.ObjectMeta.Name, n.Namespace, n.Annotations, n.ManagedFields = o.Name, o.Namespace, mergeNoise(o.Annotations), o.ManagedFields
		n.UID, n.ResourceVersion, n.DeletionTimestamp = o.UID, o.ResourceVersion, o.DeletionTimestamp
		n.Spec.Replicas, n.Status.ReadyReplicas = o.Spec.Replicas, o.Status.ReadyReplicas
		return n
	case *appsv1.StatefulSet:
		n := filled[appsv1.StatefulSet](seed)
		n.ObjectMeta.Name, n.Namespace, n.Annotations, n.ManagedFields = o.Name, o.Namespace, mergeNoise(o.Annotations), o.ManagedFields
		n.UID, n.ResourceVersion, n.DeletionTimestamp = o.UID, o.ResourceVersion, o.DeletionTimestamp
		n.Spec.Replicas, n.Status.ReadyReplicas = o.Spec.Replicas, o.Status.ReadyReplicas
		return n
	case *corev1.Pod:
		n := filled[corev1.Pod](seed)
		n.ObjectMeta.Name, n.Namespace, n.OwnerReferences = o.Name, o.Namespace, o.OwnerReferences
		n.CreationTimestamp, n.DeletionTimestamp, n.Status.Phase = o.CreationTimestamp, o.DeletionTimestamp, o.Status.Phase
		for k, v := range o.Labels {
			n.Labels[k] = v
		}
		if _, ok := o.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; !ok {
			delete(n.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
		}
		return n
	case *autoscalingv2.HorizontalPodAutoscaler:
		n := filled[autoscalingv2.HorizontalPodAutoscaler](seed)
		n.ObjectMeta.Name, n.Namespace, n.Spec.ScaleTargetRef, n.Status.LastScaleTime = o.Name, o.Namespace, o.Spec.ScaleTargetRef, o.Status.LastScaleTime
		return n
	default:
		panic(fmt.Sprintf("no noise for %T", obj))
	}
}

func mergeNoise(ann map[string]string) map[string]string {
	out := map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"kind":"Deployment"}`, "team": "ml"}
	for k, v := range ann {
		out[k] = v
	}
	return out
}

// TestTransformKeepsAnswers: the provider answers every query of the
// TestGetExternalMetric scenario identically from full objects (with random
// values in every field it does not read) and from their cache records.
func TestTransformKeepsAnswers(t *testing.T) {
	sources := scenarioSources(now.Add(-20 * time.Second))
	var objs []runtime.Object
	for i, o := range scenarioObjects() {
		objs = append(objs, noise(o, int64(i)))
	}
	// Workloads whose interval comes from managedFields alone.
	held := richDeployment(100)
	held.Name = "held"
	objs = append(objs, held, richStatefulSet(101))
	pols := append(scenarioPolicies(), gpuPolicy("ai", "Deployment", "held"), gpuPolicy("ai", "StatefulSet", "db"))

	full, _ := newTestProviderWith(t, sources, func(o any) (any, error) { return o, nil }, objs...)
	compact, _ := newTestProvider(t, sources, objs...)
	full.SetStepPolicies(pols)
	compact.SetStepPolicies(pols)

	answer := func(p *Provider, ns, metric, sel string) string {
		s, err := labels.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		l, err := p.GetExternalMetric(context.Background(), ns, s, cmprovider.ExternalMetricInfo{Metric: metric})
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("%s at %s", l.Items[0].Value.String(), l.Items[0].Timestamp.UTC())
	}
	queries := 0
	for _, ns := range []string{"web", "ai"} {
		for _, w := range []string{"shop", "big", "zero-single", "bad-total", "plain", "db", "gpu", "young", "cooling", "warm", "trainer", "stale", "missing", "held"} {
			for _, q := range []struct{ metric, sel string }{
				{names.DesiredReplicasMetric, "policy=qps,workload=" + w},
				{names.DesiredReplicasMetric, "policy=load-step,workload=" + w},
				{names.TotalQPSMetric, "workload=" + w},
				{names.RealQPSMetric, "workload=" + w},
			} {
				queries++
				if a, b := answer(full, ns, q.metric, q.sel), answer(compact, ns, q.metric, q.sel); a != b {
					t.Errorf("%s %s{%s}: full objects answer %q, cache records %q", ns, q.metric, q.sel, a, b)
				}
			}
		}
	}
	// The comparison is only worth something if the scenario's answers vary.
	if got := answer(compact, "ai", names.DesiredReplicasMetric, "policy=load-step,workload=held"); !strings.HasPrefix(got, "4 ") {
		t.Errorf("held: %s, want 4 (within the interval of the scale a minute ago)", got)
	}
	t.Logf("%d queries compared", queries)
}
