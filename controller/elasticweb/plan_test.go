package elasticweb

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/internal/names"
)

const ns = "shop-ns"

func elasticWeb(single, total float64, edit ...func(*v1alpha1.ElasticWeb)) *v1alpha1.ElasticWeb {
	ew := &v1alpha1.ElasticWeb{
		TypeMeta:   metav1.TypeMeta{APIVersion: "capscale.io/v1alpha1", Kind: "ElasticWeb"},
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns, UID: "ew-uid", Generation: 1},
		Spec:       v1alpha1.ElasticWebSpec{Image: "web:1", Port: 8080, SinglePodQPS: single, TotalQPS: total},
	}
	for _, e := range edit {
		e(ew)
	}
	return ew
}

// world holds objects as the apiserver would store them: applied through a
// field-managed fake clientset, so their managedFields are real.
type world struct {
	t  *testing.T
	cs *fake.Clientset
}

func newWorld(t *testing.T) *world { return &world{t: t, cs: fake.NewClientset()} }

var (
	capscaleApply = metav1.ApplyOptions{FieldManager: names.FieldManager, Force: true}
	ctx           = context.Background()
)

// applied returns the three objects as capscale would have applied them for
// ew, with the Deployment at replicas/ready and the Service at nodePort.
func (w *world) applied(ew *v1alpha1.ElasticWeb, replicas, ready, nodePort int32) Observed {
	w.t.Helper()
	return w.store(w.desired(ew), replicas, ready, nodePort)
}

// oneShot returns the three objects as the workload API's one-shot apply
// made them before ElasticWeb was a resource: the same labels and fields,
// applied by the capscale field manager, and no owner.
func (w *world) oneShot(ew *v1alpha1.ElasticWeb, replicas, ready, nodePort int32) Observed {
	w.t.Helper()
	d := w.desired(ew)
	d.Deployment.OwnerReferences, d.Service.OwnerReferences, d.HPA.OwnerReferences = nil, nil, nil
	return w.store(d, replicas, ready, nodePort)
}

func (w *world) desired(ew *v1alpha1.ElasticWeb) *Desired {
	w.t.Helper()
	d, err := NewDesired(ew)
	if err != nil {
		w.t.Fatal(err)
	}
	return d
}

// store applies d's objects as capscale and sets what the apiserver and the
// controllers would have added.
func (w *world) store(d *Desired, replicas, ready, nodePort int32) Observed {
	w.t.Helper()
	dep, err := w.cs.AppsV1().Deployments(ns).Apply(ctx, d.Deployment, capscaleApply)
	if err != nil {
		w.t.Fatal(err)
	}
	dep.Spec.Replicas = ptr.To(replicas)
	dep.Status.ReadyReplicas = ready
	svc, err := w.cs.CoreV1().Services(ns).Apply(ctx, d.Service, capscaleApply)
	if err != nil {
		w.t.Fatal(err)
	}
	if nodePort != 0 {
		svc.Spec.Ports[0].NodePort = nodePort
	}
	hpa, err := w.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Apply(ctx, d.HPA, capscaleApply)
	if err != nil {
		w.t.Fatal(err)
	}
	return Observed{Deployment: dep, Service: svc, HPA: hpa}
}

// setImageByHand is `kubectl set image`: an update by another manager.
func (w *world) setImageByHand(d *appsv1.Deployment, image string) *appsv1.Deployment {
	w.t.Helper()
	d = d.DeepCopy()
	d.Spec.Template.Spec.Containers[0].Image = image
	got, err := w.cs.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{FieldManager: "kubectl-set"})
	if err != nil {
		w.t.Fatal(err)
	}
	got.Status = d.Status
	return got
}

func TestPlanFor(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	foreignService := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns, UID: "svc-uid"}}
	type want struct {
		dep, svc, hpa                         Action
		invalid                               string
		qps, desired, ready, nodePort, maxHPA int32
		realQPS                               float64
		reconciled, readyCond                 metav1.ConditionStatus
		reconciledReason, readyMsg            string
		// conflictMsg is part of the Reconciled message when set.
		conflictMsg string
	}
	tests := []struct {
		name  string
		ew    *v1alpha1.ElasticWeb
		world func(w *world, ew *v1alpha1.ElasticWeb) Observed
		want  want
	}{{
		name:  "nothing exists: create all three",
		ew:    elasticWeb(500, 1800),
		world: func(*world, *v1alpha1.ElasticWeb) Observed { return Observed{} },
		want: want{dep: ActionCreate, svc: ActionCreate, hpa: ActionCreate, qps: 4, maxHPA: 10,
			reconciled: metav1.ConditionTrue, reconciledReason: v1alpha1.ReasonApplied, readyCond: metav1.ConditionFalse, readyMsg: "0 of 4 replicas ready"},
	}, {
		name: "in shape, 2 of 2 ready: nothing to apply, real QPS 1000",
		ew:   elasticWeb(500, 800),
		world: func(w *world, ew *v1alpha1.ElasticWeb) Observed {
			return w.applied(ew, 2, 2, 30080)
		},
		want: want{dep: ActionNone, svc: ActionNone, hpa: ActionNone, qps: 2, desired: 2, ready: 2, realQPS: 1000, nodePort: 30080, maxHPA: 10,
			reconciled: metav1.ConditionTrue, reconciledReason: v1alpha1.ReasonApplied, readyCond: metav1.ConditionTrue, readyMsg: "2 replicas ready, serving 1000 of 800 QPS"},
	}, {
		name: "totalQPS raised to 1800: the Deployment's annotation changes, the HPA's default max does not",
		ew:   elasticWeb(500, 1800),
		world: func(w *world, ew *v1alpha1.ElasticWeb) Observed {
			old := ew.DeepCopy()
			old.Spec.TotalQPS = 800
			return w.applied(old, 2, 2, 30080)
		},
		want: want{dep: ActionUpdate, svc: ActionNone, hpa: ActionNone, qps: 4, desired: 2, ready: 2, realQPS: 1000, nodePort: 30080, maxHPA: 10,
			reconciled: metav1.ConditionTrue, reconciledReason: v1alpha1.ReasonApplied, readyCond: metav1.ConditionFalse, readyMsg: "2 of 4 replicas ready"},
	}, {
		name: "image changed by hand: the Deployment is re-applied",
		ew:   elasticWeb(500, 800),
		world: func(w *world, ew *v1alpha1.ElasticWeb) Observed {
			o := w.applied(ew, 2, 2, 30080)
			o.Deployment = w.setImageByHand(o.Deployment, "evil:1")
			return o
		},
		want: want{dep: ActionUpdate, svc: ActionNone, hpa: ActionNone, qps: 2, desired: 2, ready: 2, realQPS: 1000, nodePort: 30080, maxHPA: 10,
			reconciled: metav1.ConditionTrue, reconciledReason: v1alpha1.ReasonApplied, readyCond: metav1.ConditionTrue},
	}, {
		name: "Service deleted: only it is created again",
		ew:   elasticWeb(500, 800),
		world: func(w *world, ew *v1alpha1.ElasticWeb) Observed {
			o := w.applied(ew, 2, 2, 30080)
			o.Service = nil
			return o
		},
		want: want{dep: ActionNone, svc: ActionCreate, hpa: ActionNone, qps: 2, desired: 2, ready: 2, realQPS: 1000, maxHPA: 10,
			reconciled: metav1.ConditionTrue, reconciledReason: v1alpha1.ReasonApplied, readyCond: metav1.ConditionTrue},
	}, {
		name: "a Service it did not create: left alone, condition says so",
		ew:   elasticWeb(500, 800),
		world: func(w *world, ew *v1alpha1.ElasticWeb) Observed {
			o := w.applied(ew, 2, 2, 0)
			o.Service = foreignService
			return o
		},
		want: want{dep: ActionNone, svc: ActionConflict, hpa: ActionNone, qps: 2, desired: 2, ready: 2, realQPS: 1000, maxHPA: 10,
			reconciled: metav1.ConditionFalse, reconciledReason: v1alpha1.ReasonObjectConflict, readyCond: metav1.ConditionTrue},
	}, {
		name: "objects of an earlier ElasticWeb of the same name: not ours either",
		ew:   elasticWeb(500, 800, func(ew *v1alpha1.ElasticWeb) { ew.UID = "new-uid" }),
		world: func(w *world, ew *v1alpha1.ElasticWeb) Observed {
			old := ew.DeepCopy()
			old.UID = "old-uid"
			return w.applied(old, 2, 2, 30080)
		},
		want: want{dep: ActionConflict, svc: ActionConflict, hpa: ActionConflict, qps: 2, maxHPA: 10,
			reconciled: metav1.ConditionFalse, reconciledReason: v1alpha1.ReasonObjectConflict, readyCond: metav1.ConditionFalse},
	}, {
		name: "objects of the old one-shot API (labelled, applied by capscale, no owner): never taken over",
		ew:   elasticWeb(500, 800),
		world: func(w *world, ew *v1alpha1.ElasticWeb) Observed {
			return w.oneShot(ew, 2, 2, 30080)
		},
		want: want{dep: ActionConflict, svc: ActionConflict, hpa: ActionConflict, qps: 2, maxHPA: 10,
			reconciled: metav1.ConditionFalse, reconciledReason: v1alpha1.ReasonObjectConflict, readyCond: metav1.ConditionFalse,
			conflictMsg: "as the workload API's old one-shot apply made it: delete it to migrate"},
	}, {
		name: "minReplicas raised: only the HPA changes",
		ew:   elasticWeb(500, 800, func(ew *v1alpha1.ElasticWeb) { ew.Spec.MinReplicas = ptr.To[int32](3) }),
		world: func(w *world, ew *v1alpha1.ElasticWeb) Observed {
			old := ew.DeepCopy()
			old.Spec.MinReplicas = nil
			return w.applied(old, 2, 2, 30080)
		},
		want: want{dep: ActionNone, svc: ActionNone, hpa: ActionUpdate, qps: 2, desired: 2, ready: 2, realQPS: 1000, nodePort: 30080, maxHPA: 10,
			reconciled: metav1.ConditionTrue, reconciledReason: v1alpha1.ReasonApplied, readyCond: metav1.ConditionFalse, readyMsg: "2 of 3 replicas ready"},
	}, {
		name:  "1.1 / 0.1 is exactly 11 replicas, as the adapter computes it",
		ew:    elasticWeb(0.1, 1.1),
		world: func(*world, *v1alpha1.ElasticWeb) Observed { return Observed{} },
		want: want{dep: ActionCreate, svc: ActionCreate, hpa: ActionCreate, qps: 11, maxHPA: 22,
			reconciled: metav1.ConditionTrue, reconciledReason: v1alpha1.ReasonApplied, readyCond: metav1.ConditionFalse},
	}, {
		name: "maxReplicas below what the QPS needs: the HPA stops there, Ready says so",
		ew:   elasticWeb(100, 1000, func(ew *v1alpha1.ElasticWeb) { ew.Spec.MaxReplicas = ptr.To[int32](5) }),
		world: func(w *world, ew *v1alpha1.ElasticWeb) Observed {
			return w.applied(ew, 5, 5, 30080)
		},
		want: want{dep: ActionNone, svc: ActionNone, hpa: ActionNone, qps: 10, desired: 5, ready: 5, realQPS: 500, nodePort: 30080, maxHPA: 5,
			reconciled: metav1.ConditionTrue, reconciledReason: v1alpha1.ReasonApplied, readyCond: metav1.ConditionTrue, readyMsg: "totalQPS needs 10 replicas but maxReplicas is 5"},
	}, {
		name:  "a QPS the adapter cannot read: nothing applied",
		ew:    elasticWeb(1e-300, 10),
		world: func(*world, *v1alpha1.ElasticWeb) Observed { return Observed{} },
		want:  want{invalid: "spec.singlePodQPS", reconciled: metav1.ConditionFalse, reconciledReason: v1alpha1.ReasonInvalidSpec, readyCond: metav1.ConditionFalse},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := tc.world(newWorld(t), tc.ew)
			obs.ElasticWeb = tc.ew
			p, err := PlanFor(obs, now)
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if w.invalid != "" {
				if p.Invalid == nil || !strings.Contains(p.Invalid.Error(), w.invalid) {
					t.Errorf("Invalid = %v, want an error naming %s", p.Invalid, w.invalid)
				}
			} else {
				if p.Invalid != nil {
					t.Fatalf("Invalid = %v", p.Invalid)
				}
				if p.Deployment.Action != w.dep || p.Service.Action != w.svc || p.HPA.Action != w.hpa {
					t.Errorf("actions (deployment, service, hpa) = (%s, %s, %s), want (%s, %s, %s)",
						p.Deployment.Action, p.Service.Action, p.HPA.Action, w.dep, w.svc, w.hpa)
				}
				if got := *p.Desired.HPA.Spec.MaxReplicas; got != w.maxHPA {
					t.Errorf("HPA maxReplicas = %d, want %d", got, w.maxHPA)
				}
			}
			st := p.Status
			if st.QPSReplicas != w.qps || st.DesiredReplicas != w.desired || st.ReadyReplicas != w.ready || st.RealQPS != w.realQPS || st.NodePort != w.nodePort {
				t.Errorf("status (qps, desired, ready, realQPS, nodePort) = (%d, %d, %d, %v, %d), want (%d, %d, %d, %v, %d)",
					st.QPSReplicas, st.DesiredReplicas, st.ReadyReplicas, st.RealQPS, st.NodePort, w.qps, w.desired, w.ready, w.realQPS, w.nodePort)
			}
			if st.ObservedGeneration != tc.ew.Generation {
				t.Errorf("observedGeneration = %d, want %d", st.ObservedGeneration, tc.ew.Generation)
			}
			rc := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReconciled)
			if rc == nil || rc.Status != w.reconciled || rc.Reason != w.reconciledReason {
				t.Errorf("Reconciled = %+v, want %s/%s", rc, w.reconciled, w.reconciledReason)
			}
			if rc != nil && w.svc == ActionConflict && !strings.Contains(rc.Message, "Service "+ns+"/shop exists and was not created by this ElasticWeb") {
				t.Errorf("Reconciled message %q does not name the Service", rc.Message)
			}
			if w.conflictMsg != "" && (rc == nil || !strings.Contains(rc.Message, w.conflictMsg)) {
				t.Errorf("Reconciled = %+v, want a message with %q", rc, w.conflictMsg)
			}
			ready := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
			if ready == nil || ready.Status != w.readyCond || !strings.Contains(ready.Message, w.readyMsg) {
				t.Errorf("Ready = %+v, want %s with %q", ready, w.readyCond, w.readyMsg)
			}
		})
	}
}

// TestDesiredObjects pins the shapes the adapter and the HPA rely on.
func TestDesiredObjects(t *testing.T) {
	ew := elasticWeb(500, 1800, func(ew *v1alpha1.ElasticWeb) {
		ew.Spec.Resources = &v1alpha1.ContainerResources{Requests: corev1.ResourceList{corev1.ResourceCPU: *resourceQ("100m")}}
	})
	d, err := NewDesired(ew)
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	dep, err := cs.AppsV1().Deployments(ns).Apply(ctx, d.Deployment, capscaleApply)
	if err != nil {
		t.Fatal(err)
	}
	if dep.Annotations[names.SinglePodQPSAnnotation] != "500" || dep.Annotations[names.TotalQPSAnnotation] != "1800" {
		t.Errorf("QPS annotations %v", dep.Annotations)
	}
	if dep.Spec.Replicas != nil {
		t.Errorf("the Deployment sets replicas %d: it would fight the HPA", *dep.Spec.Replicas)
	}
	ref := metav1.GetControllerOf(dep)
	if ref == nil || ref.UID != ew.UID || ref.Kind != "ElasticWeb" || ref.APIVersion != "capscale.io/v1alpha1" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("owner reference %+v", ref)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != "web:1" || c.Ports[0].ContainerPort != 8080 || c.Resources.Requests.Cpu().String() != "100m" {
		t.Errorf("container %+v", c)
	}
	if dep.Spec.Selector.MatchLabels[names.ElasticWebLabel] != "shop" || dep.Spec.Template.Labels[names.ElasticWebLabel] != "shop" {
		t.Errorf("selector %v, pod labels %v", dep.Spec.Selector, dep.Spec.Template.Labels)
	}
	hpa, err := cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Apply(ctx, d.HPA, capscaleApply)
	if err != nil {
		t.Fatal(err)
	}
	m := hpa.Spec.Metrics[0]
	if m.Type != autoscalingv2.ExternalMetricSourceType || m.External.Metric.Name != names.DesiredReplicasMetric ||
		m.External.Metric.Selector.MatchLabels["policy"] != names.PolicyQPS || m.External.Metric.Selector.MatchLabels["workload"] != "shop" ||
		m.External.Target.AverageValue.String() != "1" {
		t.Errorf("HPA metric %+v", m)
	}
	if hpa.Spec.Behavior.ScaleUp.Tolerance.IsZero() != true || hpa.Spec.ScaleTargetRef.Name != "shop" {
		t.Errorf("HPA %+v", hpa.Spec)
	}
	svc, err := cs.CoreV1().Services(ns).Apply(ctx, d.Service, capscaleApply)
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Selector[names.ElasticWebLabel] != "shop" {
		t.Errorf("Service %+v", svc.Spec)
	}
}

// TestUnstructuredRoundTrip: what the informer holds (JSON integers for
// whole QPS figures) decodes into the Go types.
func TestUnstructuredRoundTrip(t *testing.T) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(`{"apiVersion":"capscale.io/v1alpha1","kind":"ElasticWeb","metadata":{"name":"shop","namespace":"x"},
		"spec":{"image":"web:1","port":8080,"singlePodQPS":500,"totalQPS":1800.5,"minReplicas":1}}`)); err != nil {
		t.Fatal(err)
	}
	var ew v1alpha1.ElasticWeb
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ew); err != nil {
		t.Fatal(err)
	}
	if ew.Spec.SinglePodQPS != 500 || ew.Spec.TotalQPS != 1800.5 || ew.Spec.Port != 8080 || *ew.Spec.MinReplicas != 1 {
		t.Errorf("decoded %+v", ew.Spec)
	}
}

// TestStatusUnchangedIsEqual: planning again from a written status changes
// nothing, so a status write never triggers another write.
func TestStatusUnchangedIsEqual(t *testing.T) {
	w := newWorld(t)
	ew := elasticWeb(500, 800)
	obs := w.applied(ew, 2, 2, 30080)
	obs.ElasticWeb = ew
	p1, err := PlanFor(obs, metav1.NewTime(time.Unix(1000, 0)))
	if err != nil {
		t.Fatal(err)
	}
	ew.Status = p1.Status
	p2, err := PlanFor(obs, metav1.NewTime(time.Unix(2000, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if !StatusEqual(&ew.Status, &p2.Status) {
		t.Errorf("a second plan changed the status:\n%+v\n%+v", ew.Status, p2.Status)
	}
}

func resourceQ(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
