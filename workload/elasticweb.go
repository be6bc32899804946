package workload

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/metricsadapter/policy"
)

// ElasticWebLabel marks the objects of an elastic web and selects its pods.
const ElasticWebLabel = "capscale.io/elasticweb"

// Defaults of the optional elastic web fields.
const (
	defaultElasticMinReplicas = 1
	// maxReplicas defaults to twice what the QPS asks for, at least this.
	defaultElasticMaxReplicasFloor = 10
)

// ElasticWebRequest is the body of PUT .../elasticwebs/{name}.
type ElasticWebRequest struct {
	Image        string   `json:"image"`
	Port         *int32   `json:"port"`
	SinglePodQPS *float64 `json:"singlePodQPS"`
	TotalQPS     *float64 `json:"totalQPS"`
	// MinReplicas defaults to 1 (0 needs the HPAScaleToZero feature gate).
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// MaxReplicas defaults to max(10, 2 × ceil(totalQPS / singlePodQPS)).
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`
}

// validate returns every problem, each naming its field.
func (req *ElasticWebRequest) validate(name string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1035Label(name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), name, msg))
	}
	img := field.NewPath("image")
	switch {
	case req.Image == "":
		errs = append(errs, field.Required(img, "the container image to run"))
	case strings.ContainsAny(req.Image, " \t\r\n"):
		errs = append(errs, field.Invalid(img, req.Image, "must not contain whitespace"))
	}
	port := field.NewPath("port")
	if req.Port == nil {
		errs = append(errs, field.Required(port, "the container port to serve"))
	} else {
		for _, msg := range validation.IsValidPortNum(int(*req.Port)) {
			errs = append(errs, field.Invalid(port, *req.Port, msg))
		}
	}
	single := field.NewPath("singlePodQPS")
	if req.SinglePodQPS == nil {
		errs = append(errs, field.Required(single, "the QPS one pod serves"))
	} else if !(*req.SinglePodQPS > 0) || math.IsInf(*req.SinglePodQPS, 0) {
		errs = append(errs, field.Invalid(single, *req.SinglePodQPS, "must be greater than 0"))
	}
	total := field.NewPath("totalQPS")
	if req.TotalQPS == nil {
		errs = append(errs, field.Required(total, "the QPS the service must serve"))
	} else if !(*req.TotalQPS >= 0) || math.IsInf(*req.TotalQPS, 0) {
		errs = append(errs, field.Invalid(total, *req.TotalQPS, "must be greater than or equal to 0"))
	}
	qpsChecked := func(e *field.Error) bool { return e.Field == single.String() || e.Field == total.String() }
	if req.SinglePodQPS != nil && req.TotalQPS != nil && !slices.ContainsFunc(errs, qpsChecked) {
		// What the adapter cannot read would leave the HPA without a metric.
		ann := qpsAnnotations(*req.TotalQPS, *req.SinglePodQPS)
		if _, err := policy.ParseSinglePodQPS(ann); err != nil {
			errs = append(errs, field.Invalid(single, *req.SinglePodQPS, err.Error()))
		}
		if _, err := policy.ParseTotalQPS(ann); err != nil {
			errs = append(errs, field.Invalid(total, *req.TotalQPS, err.Error()))
		}
	}
	if req.MinReplicas != nil && *req.MinReplicas < 0 {
		errs = append(errs, field.Invalid(field.NewPath("minReplicas"), *req.MinReplicas, "must be greater than or equal to 0"))
	}
	if req.MaxReplicas != nil {
		lo := int32(1)
		if req.MinReplicas != nil && *req.MinReplicas > lo {
			lo = *req.MinReplicas
		}
		if *req.MaxReplicas < lo {
			errs = append(errs, field.Invalid(field.NewPath("maxReplicas"), *req.MaxReplicas, fmt.Sprintf("must be at least %d (and at least minReplicas)", lo)))
		}
	}
	return errs
}

// qpsAnnotations are the QPS inputs as the Deployment carries them, and as
// the adapter's QPS policy reads them.
func qpsAnnotations(total, single float64) map[string]string {
	return map[string]string{
		names.SinglePodQPSAnnotation: formatQPS(single),
		names.TotalQPSAnnotation:     formatQPS(total),
	}
}

// qpsReplicas is ceil(total / single) by the adapter's own exact rule, over
// the annotation text it will read: elastic web and the HPA's metric cannot
// disagree (float division makes ceil(0.33/0.03) 12; the rule says 11). It is
// 0 for inputs the adapter would refuse, which validate rejects first.
func qpsReplicas(total, single float64) int32 {
	n, err := policy.DesiredReplicasFromAnnotations(qpsAnnotations(total, single))
	if err != nil {
		return 0
	}
	return int32(n) // DesiredReplicasForQPS caps at MaxInt32
}

func (req *ElasticWebRequest) bounds() (int32, int32) {
	minR := int32(defaultElasticMinReplicas)
	if req.MinReplicas != nil {
		minR = *req.MinReplicas
	}
	maxR := int32(defaultElasticMaxReplicasFloor)
	if want := qpsReplicas(*req.TotalQPS, *req.SinglePodQPS); want <= math.MaxInt32/2 && 2*want > maxR {
		maxR = 2 * want
	}
	if req.MaxReplicas != nil {
		maxR = *req.MaxReplicas
	}
	if maxR < minR {
		maxR = minR
	}
	return minR, maxR
}

func formatQPS(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func elasticLabels(name string) map[string]string {
	return map[string]string{
		ElasticWebLabel:                name,
		"app.kubernetes.io/name":       name,
		"app.kubernetes.io/managed-by": names.FieldManager,
	}
}

// elasticWebObjects builds the apply configurations of an elastic web.
// Deployment replicas are left out on purpose: the HPA owns them, and an
// apply that set them would fight it on every update.
func elasticWebObjects(ns, name string, req *ElasticWebRequest) (*appsv1ac.DeploymentApplyConfiguration, *corev1ac.ServiceApplyConfiguration, *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration) {
	lbls := elasticLabels(name)
	sel := map[string]string{ElasticWebLabel: name}
	port := *req.Port
	dep := appsv1ac.Deployment(name, ns).
		WithLabels(lbls).
		WithAnnotations(qpsAnnotations(*req.TotalQPS, *req.SinglePodQPS)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(sel)).
			WithStrategy(appsv1ac.DeploymentStrategy().WithType("RollingUpdate").
				WithRollingUpdate(appsv1ac.RollingUpdateDeployment().
					WithMaxUnavailable(intstr.FromInt32(0)).WithMaxSurge(intstr.FromString("25%")))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(lbls).
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().
					WithName("web").
					WithImage(req.Image).
					WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(port).WithProtocol(corev1.ProtocolTCP)).
					WithReadinessProbe(corev1ac.Probe().
						WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromInt32(port))).
						WithPeriodSeconds(5))))))
	svc := corev1ac.Service(name, ns).
		WithLabels(lbls).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeNodePort).
			WithSelector(sel).
			WithPorts(corev1ac.ServicePort().WithName("http").WithProtocol(corev1.ProtocolTCP).
				WithPort(port).WithTargetPort(intstr.FromInt32(port))))
	minR, maxR := req.bounds()
	zero := resource.MustParse("0")
	hpa := autoscalingv2ac.HorizontalPodAutoscaler(name, ns).
		WithLabels(lbls).
		WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().
			WithScaleTargetRef(autoscalingv2ac.CrossVersionObjectReference().
				WithAPIVersion("apps/v1").WithKind(deploymentKind.kind()).WithName(name)).
			WithMinReplicas(minR).
			WithMaxReplicas(maxR).
			WithMetrics(autoscalingv2ac.MetricSpec().
				WithType(autoscalingv2.ExternalMetricSourceType).
				WithExternal(autoscalingv2ac.ExternalMetricSource().
					WithMetric(autoscalingv2ac.MetricIdentifier().
						WithName(names.DesiredReplicasMetric).
						WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{
							"workload": name, "policy": names.PolicyQPS,
						}))).
					WithTarget(autoscalingv2ac.MetricTarget().
						WithType(autoscalingv2.AverageValueMetricType).
						WithAverageValue(resource.MustParse("1"))))).
			// The metric is already a replica count: with the default ±10%
			// tolerance the HPA would ignore 20 → 21.
			WithBehavior(autoscalingv2ac.HorizontalPodAutoscalerBehavior().
				WithScaleUp(autoscalingv2ac.HPAScalingRules().WithTolerance(zero)).
				WithScaleDown(autoscalingv2ac.HPAScalingRules().WithTolerance(zero))))
	return dep, svc, hpa
}

// ElasticWebStatus is the answer of GET (and PUT) .../elasticwebs/{name}.
type ElasticWebStatus struct {
	Namespace    string  `json:"namespace"`
	Name         string  `json:"name"`
	Image        string  `json:"image,omitempty"`
	Port         int32   `json:"port,omitempty"`
	SinglePodQPS float64 `json:"singlePodQPS"`
	TotalQPS     float64 `json:"totalQPS"`
	// QPSReplicas is ceil(totalQPS / singlePodQPS), what the QPS policy asks.
	QPSReplicas int32 `json:"qpsReplicas"`
	// DesiredReplicas is the Deployment's spec.replicas (as the HPA set it).
	DesiredReplicas int32 `json:"desiredReplicas"`
	ReadyReplicas   int32 `json:"readyReplicas"`
	// RealQPS is readyReplicas × singlePodQPS, what is served now.
	RealQPS  float64  `json:"realQPS"`
	NodePort int32    `json:"nodePort,omitempty"`
	HPA      *HPAInfo `json:"hpa,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

func (s *Server) applyElasticWeb(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), targetOf(r)
	c := callerClient(r)
	var req ElasticWebRequest
	if !decodeBody(w, r, &req, false) {
		return
	}
	if errs := req.validate(p.name); len(errs) > 0 {
		httpserver.WriteError(w, http.StatusUnprocessableEntity, errs.ToAggregate().Error())
		return
	}
	// Refuse to take over a Deployment, Service or HPA that is not part of
	// an elastic web: an apply with force would silently rewrite someone
	// else's object. Read as the caller, who needs get on each anyway.
	if err := refuseForeign(ctx, c, p.namespace, p.name); err != nil {
		writeError(w, r, fmt.Sprintf("applying elastic web %s/%s", p.namespace, p.name), err)
		return
	}
	dep, svc, hpa := elasticWebObjects(p.namespace, p.name, &req)
	// Force: capscale owns these objects; a field another manager set by hand
	// is taken back rather than leaving the elastic web half-applied.
	opts := metav1.ApplyOptions{FieldManager: names.FieldManager, Force: true}
	gotDep, err := c.AppsV1().Deployments(p.namespace).Apply(ctx, dep, opts)
	if err != nil {
		writeError(w, r, fmt.Sprintf("applying deployment %s/%s", p.namespace, p.name), err)
		return
	}
	gotSvc, err := c.CoreV1().Services(p.namespace).Apply(ctx, svc, opts)
	if err != nil {
		writeError(w, r, fmt.Sprintf("applying service %s/%s", p.namespace, p.name), err)
		return
	}
	gotHPA, err := c.AutoscalingV2().HorizontalPodAutoscalers(p.namespace).Apply(ctx, hpa, opts)
	if err != nil {
		writeError(w, r, fmt.Sprintf("applying horizontalpodautoscaler %s/%s", p.namespace, p.name), err)
		return
	}
	minR, maxR := req.bounds()
	st := ElasticWebStatus{
		Namespace: p.namespace, Name: p.name, Image: req.Image, Port: *req.Port,
		SinglePodQPS: *req.SinglePodQPS, TotalQPS: *req.TotalQPS,
		QPSReplicas:     qpsReplicas(*req.TotalQPS, *req.SinglePodQPS),
		DesiredReplicas: replicasOf(gotDep.Spec.Replicas), ReadyReplicas: gotDep.Status.ReadyReplicas,
		HPA: hpaInfo(gotHPA),
	}
	st.RealQPS = float64(st.ReadyReplicas) * st.SinglePodQPS
	for _, sp := range gotSvc.Spec.Ports {
		st.NodePort = sp.NodePort
	}
	if st.QPSReplicas > maxR {
		st.Warnings = append(st.Warnings, fmt.Sprintf("totalQPS asks for %d replicas but maxReplicas is %d: the HPA stops there", st.QPSReplicas, maxR))
	}
	if st.QPSReplicas < minR {
		st.Warnings = append(st.Warnings, fmt.Sprintf("totalQPS asks for %d replicas but minReplicas is %d: the HPA keeps at least that", st.QPSReplicas, minR))
	}
	httpserver.WriteJSON(w, http.StatusOK, st)
}

// refuseForeign returns a *conflictError when an object of the elastic web's
// name exists without its label, and the read's error if a read fails.
func refuseForeign(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	reads := []struct {
		what string
		get  func() (metav1.Object, error)
	}{
		{"deployment", func() (metav1.Object, error) { return c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}) }},
		{"service", func() (metav1.Object, error) { return c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}) }},
		{"horizontalpodautoscaler", func() (metav1.Object, error) {
			return c.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, name, metav1.GetOptions{})
		}},
	}
	for _, rd := range reads {
		o, err := rd.get()
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("reading %s %s/%s: %w", rd.what, ns, name, err)
		case !isElasticWebPart(o.GetLabels(), name):
			return &conflictError{fmt.Sprintf("%s %s/%s exists and is not an elastic web (no label %s=%s); choose another name", rd.what, ns, name, ElasticWebLabel, name)}
		}
	}
	return nil
}

func isElasticWebPart(labels map[string]string, name string) bool {
	return labels[ElasticWebLabel] == name
}

func (s *Server) getElasticWeb(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), targetOf(r)
	c := callerClient(r)
	d, err := c.AppsV1().Deployments(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
	if err != nil {
		writeError(w, r, fmt.Sprintf("reading elastic web %s/%s", p.namespace, p.name), err)
		return
	}
	if !isElasticWebPart(d.Labels, p.name) {
		httpserver.WriteError(w, http.StatusNotFound, fmt.Sprintf("deployment %s/%s is not an elastic web", p.namespace, p.name))
		return
	}
	st := ElasticWebStatus{
		Namespace: p.namespace, Name: p.name,
		DesiredReplicas: replicasOf(d.Spec.Replicas), ReadyReplicas: d.Status.ReadyReplicas,
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "web" {
			st.Image = c.Image
			for _, cp := range c.Ports {
				st.Port = cp.ContainerPort
			}
		}
	}
	single, errS := strconv.ParseFloat(d.Annotations[names.SinglePodQPSAnnotation], 64)
	total, errT := strconv.ParseFloat(d.Annotations[names.TotalQPSAnnotation], 64)
	if errS != nil || errT != nil {
		st.Warnings = append(st.Warnings, "QPS annotations are missing or not numbers; re-apply the elastic web")
	} else {
		st.SinglePodQPS, st.TotalQPS = single, total
		st.QPSReplicas = qpsReplicas(total, single)
		st.RealQPS = float64(st.ReadyReplicas) * single
	}
	svc, err := c.CoreV1().Services(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		st.Warnings = append(st.Warnings, "service is missing; re-apply the elastic web")
	case err != nil:
		writeError(w, r, fmt.Sprintf("reading service %s/%s", p.namespace, p.name), err)
		return
	default:
		for _, sp := range svc.Spec.Ports {
			st.NodePort = sp.NodePort
		}
	}
	h, err := hpaFor(ctx, c, p.namespace, deploymentKind.kind(), p.name)
	if err != nil {
		writeError(w, r, "finding the elastic web's HPA", err)
		return
	}
	if h == nil {
		st.Warnings = append(st.Warnings, "no HorizontalPodAutoscaler targets the deployment; re-apply the elastic web")
	}
	st.HPA = hpaInfo(h)
	httpserver.WriteJSON(w, http.StatusOK, st)
}
