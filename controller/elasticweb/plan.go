// Package elasticweb is the ElasticWeb controller: per ElasticWeb it keeps a
// Deployment, a Service and an HPA of the same name in shape with
// server-side apply, and reports what runs in the ElasticWeb's status.
//
// The decisions are plain functions (Desired, PlanFor) over an ElasticWeb and
// the objects the caches show; controller.go does the Kubernetes I/O.
package elasticweb

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/qps"
)

// Observed is what the caches show for one ElasticWeb; a nil object is absent.
type Observed struct {
	ElasticWeb *v1alpha1.ElasticWeb
	Deployment *appsv1.Deployment
	Service    *corev1.Service
	HPA        *autoscalingv2.HorizontalPodAutoscaler
}

// Action is what to do with one owned object.
type Action string

// The actions of a child object.
const (
	// ActionNone: the object is ours and every field capscale owns matches.
	ActionNone Action = "None"
	// ActionCreate: the object is absent; the apply must create it.
	ActionCreate Action = "Create"
	// ActionUpdate: the object is ours and differs from the spec (the spec
	// changed, or someone changed or removed a field capscale owns).
	ActionUpdate Action = "Update"
	// ActionConflict: an object of that name exists that this ElasticWeb did
	// not create; capscale leaves it alone.
	ActionConflict Action = "Conflict"
)

// Child is the plan for one owned object.
type Child struct {
	Kind   string
	Action Action
	// UID is the existing object's UID for ActionUpdate; the apply carries
	// it so that it can never patch an object that was replaced meanwhile.
	UID types.UID
	// Message says why, for ActionConflict.
	Message string
	// Existing is the cached object for ActionNone and ActionUpdate.
	Existing metav1.Object
}

// Desired are the apply configurations of an ElasticWeb's objects.
type Desired struct {
	Deployment *appsv1ac.DeploymentApplyConfiguration
	Service    *corev1ac.ServiceApplyConfiguration
	HPA        *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration
	// QPSReplicas is ceil(totalQPS / singlePodQPS), exactly as the adapter.
	QPSReplicas      int32
	MinReplicas      int32
	MaxReplicas      int32
	SinglePodQPS     qps.Value
	TotalQPS         qps.Value
	AnnotationValues map[string]string
}

// NewDesired builds the objects of ew. It parses the QPS figures from the
// very annotations the Deployment will carry, with the adapter's own parser,
// so the controller's qpsReplicas is the adapter's to the last digit; a spec
// the adapter could not read is an error here rather than a broken HPA.
func NewDesired(ew *v1alpha1.ElasticWeb) (*Desired, error) {
	ann := QPSAnnotations(&ew.Spec)
	single, err := qps.ParseSinglePod(ann)
	if err != nil {
		return nil, fmt.Errorf("spec.singlePodQPS: %w", err)
	}
	total, err := qps.ParseTotal(ann)
	if err != nil {
		return nil, fmt.Errorf("spec.totalQPS: %w", err)
	}
	if ew.Spec.Port < 1 || ew.Spec.Port > 65535 {
		return nil, fmt.Errorf("spec.port: %d is not in 1..65535", ew.Spec.Port)
	}
	if ew.Spec.Image == "" {
		return nil, fmt.Errorf("spec.image: required")
	}
	q := qps.DesiredReplicas(total, single)
	if q > math.MaxInt32 {
		q = math.MaxInt32
	}
	d := &Desired{QPSReplicas: int32(q), SinglePodQPS: single, TotalQPS: total, AnnotationValues: ann}
	d.MinReplicas, d.MaxReplicas = Bounds(&ew.Spec, d.QPSReplicas)
	d.Deployment = desiredDeployment(ew)
	d.Service = desiredService(ew)
	d.HPA = desiredHPA(ew, d.MinReplicas, d.MaxReplicas)
	return d, nil
}

// Plan is what one reconcile does: the three objects' actions and the status.
type Plan struct {
	Desired    *Desired
	Deployment Child
	Service    Child
	HPA        Child
	// Invalid is set when the spec cannot be turned into objects; nothing
	// is applied then.
	Invalid error
	Status  v1alpha1.ElasticWebStatus
}

// Children returns the three object plans in apply order.
func (p *Plan) Children() []*Child { return []*Child{&p.Deployment, &p.Service, &p.HPA} }

// PlanFor decides what to do for obs.ElasticWeb (not nil) and computes its
// status, assuming the applies it asks for succeed. now stamps condition
// transitions.
func PlanFor(obs Observed, now metav1.Time) (*Plan, error) {
	ew := obs.ElasticWeb
	p := &Plan{}
	p.Status = *ew.Status.DeepCopy()
	p.Status.ObservedGeneration = ew.Generation
	d, err := NewDesired(ew)
	if err != nil {
		p.Invalid = err
		setCondition(&p.Status, ew, now, v1alpha1.ConditionReconciled, false, v1alpha1.ReasonInvalidSpec, err.Error())
		setCondition(&p.Status, ew, now, v1alpha1.ConditionReady, false, v1alpha1.ReasonInvalidSpec, "the spec cannot be applied")
		return p, nil
	}
	p.Desired = d

	p.Deployment, err = childPlan(ew, "Deployment", obs.Deployment, d.Deployment, func() (any, error) {
		return appsv1ac.ExtractDeployment(obs.Deployment, names.FieldManager)
	})
	if err != nil {
		return nil, err
	}
	p.Service, err = childPlan(ew, "Service", obs.Service, d.Service, func() (any, error) {
		return corev1ac.ExtractService(obs.Service, names.FieldManager)
	})
	if err != nil {
		return nil, err
	}
	p.HPA, err = childPlan(ew, "HorizontalPodAutoscaler", obs.HPA, d.HPA, func() (any, error) {
		return autoscalingv2ac.ExtractHorizontalPodAutoscaler(obs.HPA, names.FieldManager)
	})
	if err != nil {
		return nil, err
	}

	st := &p.Status
	st.QPSReplicas = d.QPSReplicas
	st.DesiredReplicas, st.ReadyReplicas, st.NodePort = 0, 0, 0
	if p.Deployment.Action != ActionConflict && obs.Deployment != nil {
		if obs.Deployment.Spec.Replicas != nil {
			st.DesiredReplicas = *obs.Deployment.Spec.Replicas
		}
		st.ReadyReplicas = obs.Deployment.Status.ReadyReplicas
	}
	if p.Service.Action != ActionConflict && obs.Service != nil {
		for _, sp := range obs.Service.Spec.Ports {
			st.NodePort = sp.NodePort
		}
	}
	// The adapter's arithmetic: ready × the parsed single-pod QPS.
	st.RealQPS = qps.Real(st.ReadyReplicas, d.SinglePodQPS)

	var conflicts []string
	for _, c := range p.Children() {
		if c.Action == ActionConflict {
			conflicts = append(conflicts, c.Message)
		}
	}
	if len(conflicts) > 0 {
		setCondition(st, ew, now, v1alpha1.ConditionReconciled, false, v1alpha1.ReasonObjectConflict, strings.Join(conflicts, "; "))
	} else {
		setCondition(st, ew, now, v1alpha1.ConditionReconciled, true, v1alpha1.ReasonApplied, "the Deployment, Service and HorizontalPodAutoscaler match the spec")
	}
	want := min(max(d.QPSReplicas, d.MinReplicas), d.MaxReplicas)
	capped := ""
	if d.QPSReplicas > d.MaxReplicas {
		capped = fmt.Sprintf("; totalQPS needs %d replicas but maxReplicas is %d", d.QPSReplicas, d.MaxReplicas)
	}
	if p.Deployment.Action != ActionConflict && st.ReadyReplicas >= want {
		setCondition(st, ew, now, v1alpha1.ConditionReady, true, v1alpha1.ReasonEnoughReplicas,
			fmt.Sprintf("%d replicas ready, serving %s of %s QPS%s", st.ReadyReplicas, formatQPS(st.RealQPS), d.AnnotationValues[names.TotalQPSAnnotation], capped))
	} else {
		setCondition(st, ew, now, v1alpha1.ConditionReady, false, v1alpha1.ReasonScaling,
			fmt.Sprintf("%d of %d replicas ready%s", st.ReadyReplicas, want, capped))
	}
	return p, nil
}

// childPlan compares an existing object with its desired apply
// configuration. Only what capscale applied counts: extract returns the
// fields the capscale manager owns, so a field someone else took over (an
// image set by hand) or removed shows up as a difference, while fields
// others own (the HPA's replicas) do not.
func childPlan(ew *v1alpha1.ElasticWeb, kind string, existing metav1.Object, desired any, extract func() (any, error)) (Child, error) {
	c := Child{Kind: kind}
	if isNil(existing) {
		c.Action = ActionCreate
		return c, nil
	}
	if ref := metav1.GetControllerOf(existing); ref == nil || ref.UID != ew.UID {
		c.Action = ActionConflict
		c.Message = conflictMessage(kind, existing, ref)
		return c, nil
	}
	c.UID, c.Existing = existing.GetUID(), existing
	got, err := extract()
	if err != nil {
		return c, fmt.Errorf("reading what %s owns in %s %s/%s: %w", names.FieldManager, kind, existing.GetNamespace(), existing.GetName(), err)
	}
	same, err := sameJSON(got, desired)
	if err != nil {
		return c, err
	}
	if same {
		c.Action = ActionNone
	} else {
		c.Action = ActionUpdate
	}
	return c, nil
}

func conflictMessage(kind string, obj metav1.Object, ref *metav1.OwnerReference) string {
	owner := "no controller"
	if ref != nil {
		owner = fmt.Sprintf("controller %s %s", ref.Kind, ref.Name)
	}
	what := "delete it or choose another name"
	if ref == nil && obj.GetLabels()[names.ElasticWebLabel] == obj.GetName() {
		// Labelled as ours but owned by nothing: what the workload API's
		// one-shot apply made before ElasticWeb was a resource.
		what = "it carries the label " + names.ElasticWebLabel + " without an owner, as the workload API's old one-shot apply made it: delete it to migrate (docs/elasticweb.md: Migrating from the one-shot API)"
	}
	return fmt.Sprintf("%s %s/%s exists and was not created by this ElasticWeb (%s); capscale leaves it alone: %s", kind, obj.GetNamespace(), obj.GetName(), owner, what)
}

func isNil(o metav1.Object) bool {
	if o == nil {
		return true
	}
	v := reflect.ValueOf(o)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// sameJSON compares two apply configurations as JSON values, so that map
// order and pointer identity do not matter.
func sameJSON(a, b any) (bool, error) {
	var va, vb any
	for _, x := range []struct {
		in  any
		out *any
	}{{a, &va}, {b, &vb}} {
		raw, err := json.Marshal(x.in)
		if err != nil {
			return false, fmt.Errorf("encoding apply configuration: %w", err)
		}
		if err := json.Unmarshal(raw, x.out); err != nil {
			return false, err
		}
	}
	return reflect.DeepEqual(va, vb), nil
}

func setCondition(st *v1alpha1.ElasticWebStatus, ew *v1alpha1.ElasticWeb, now metav1.Time, typ string, ok bool, reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	// SetStatusCondition keeps lastTransitionTime unless the status flips,
	// so an unchanged status is an unchanged object (no write).
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: s, ObservedGeneration: ew.Generation,
		LastTransitionTime: now, Reason: reason, Message: msg,
	})
}

// StatusEqual reports whether two statuses are the same.
func StatusEqual(a, b *v1alpha1.ElasticWebStatus) bool { return apiequality.Semantic.DeepEqual(a, b) }
