// Package provider is the external-metrics provider of the adapter: it
// answers external.metrics.k8s.io requests from in-memory state only (source
// samples and informer caches), so an HPA sync never waits on the network.
package provider

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/metrics/pkg/apis/external_metrics"
	"k8s.io/utils/clock"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/qps"
	"github.com/capscale/capscale/metricsadapter/config"
	"github.com/capscale/capscale/metricsadapter/policy"
	"github.com/capscale/capscale/metricsadapter/source"
)

// Selector label keys.
const (
	LabelSource   = "source"
	LabelWorkload = "workload"
	LabelPolicy   = "policy"
)

// SourceReader gives the current reading of a named source; see
// source.Manager.Read.
type SourceReader interface {
	Read(name string) (source.Reading, error)
}

// allMetrics is returned by ListAllExternalMetrics, which runs on every
// discovery request and must not allocate or fail.
var allMetrics = []cmprovider.ExternalMetricInfo{
	{Metric: names.LoadIndexMetric},
	{Metric: names.DesiredReplicasMetric},
	{Metric: names.TotalQPSMetric},
	{Metric: names.RealQPSMetric},
}

// knownMetrics lists allMetrics for error messages.
var knownMetrics = func() string {
	n := make([]string, len(allMetrics))
	for i, m := range allMetrics {
		n[i] = m.Metric
	}
	return strings.Join(n, ", ")
}()

// Options configure a Provider.
type Options struct {
	// Informers is the shared factory the provider takes its listers from;
	// the caller starts it.
	Informers informers.SharedInformerFactory
	// Sources answers load-index reads.
	Sources SourceReader
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
}

// Provider implements provider.ExternalMetricsProvider.
type Provider struct {
	sources      SourceReader
	clock        clock.PassiveClock
	deployments  appslisters.DeploymentLister
	statefulSets appslisters.StatefulSetLister
	podIndexer   cache.Indexer
	hpas         autoscalinglisters.HorizontalPodAutoscalerLister
	synced       []cache.InformerSynced
	metrics      *Metrics

	// policies maps namespace/name to a step policy; replaced on reload.
	policies atomic.Pointer[map[string]config.StepPolicy]
}

var _ cmprovider.ExternalMetricsProvider = (*Provider)(nil)

// New wires a Provider to the informers it reads (Deployments,
// StatefulSets, non-terminal Pods and autoscaling/v2 HPAs) and installs the
// transforms that cache only what it reads; call it before the factory
// starts.
func New(o Options) (*Provider, error) {
	if o.Informers == nil || o.Sources == nil {
		return nil, errors.New("provider needs informers and sources")
	}
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	p := &Provider{
		sources: o.Sources,
		clock:   clk,
		metrics: newMetrics(),
	}
	deploy := o.Informers.Apps().V1().Deployments()
	sts := o.Informers.Apps().V1().StatefulSets()
	hpas := o.Informers.Autoscaling().V2().HorizontalPodAutoscalers()
	p.deployments, p.statefulSets, p.hpas = deploy.Lister(), sts.Lister(), hpas.Lister()
	pods, err := podInformer(o.Informers)
	if err != nil {
		return nil, err
	}
	// Pods are looked up by owning workload, not by listing the namespace
	// and matching selectors: that is O(pods in the namespace) per request.
	if err := pods.AddIndexers(cache.Indexers{podWorkloadIndex: podWorkloadKeys}); err != nil {
		return nil, fmt.Errorf("indexing pods by workload: %w", err)
	}
	p.podIndexer = pods.GetIndexer()
	for what, inf := range map[string]cache.SharedIndexInformer{
		"deployment": deploy.Informer(), "statefulset": sts.Informer(), "HPA": hpas.Informer(),
	} {
		if err := setTransform(inf, what); err != nil {
			return nil, err
		}
		p.synced = append(p.synced, inf.HasSynced)
	}
	p.synced = append(p.synced, pods.HasSynced)
	empty := map[string]config.StepPolicy{}
	p.policies.Store(&empty)
	return p, nil
}

// HasSynced reports whether every informer the provider reads has synced;
// /readyz waits for it.
func (p *Provider) HasSynced() bool {
	for _, s := range p.synced {
		if !s() {
			return false
		}
	}
	return true
}

// SetStepPolicies replaces the step policies (on config load and reload).
func (p *Provider) SetStepPolicies(policies []config.StepPolicy) {
	m := make(map[string]config.StepPolicy, len(policies))
	for _, sp := range policies {
		m[sp.Workload.Namespace+"/"+sp.Workload.Name] = sp
	}
	p.policies.Store(&m)
}

// ListAllExternalMetrics implements provider.ExternalMetricsProvider.
func (p *Provider) ListAllExternalMetrics() []cmprovider.ExternalMetricInfo {
	return allMetrics
}

// GetExternalMetric implements provider.ExternalMetricsProvider. It returns
// exactly one item, because an HPA sums every item returned for its
// selector.
func (p *Provider) GetExternalMetric(ctx context.Context, namespace string, selector labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	item, err := p.get(namespace, selector, info.Metric)
	p.metrics.observe(info.Metric, err)
	if err != nil {
		logger := klog.FromContext(ctx).WithValues("namespace", namespace, "metric", info.Metric, "selector", fmt.Sprint(selector))
		if code := statusCode(err); code >= 500 {
			logger.Info("External metric unavailable", "err", err)
		} else {
			logger.V(2).Info("External metric request rejected", "err", err)
		}
		return nil, err
	}
	return &external_metrics.ExternalMetricValueList{Items: []external_metrics.ExternalMetricValue{item}}, nil
}

func (p *Provider) get(namespace string, selector labels.Selector, metric string) (external_metrics.ExternalMetricValue, error) {
	var want []string
	switch metric {
	case names.LoadIndexMetric:
		want = []string{LabelSource}
	case names.DesiredReplicasMetric:
		want = []string{LabelWorkload, LabelPolicy}
	case names.TotalQPSMetric, names.RealQPSMetric:
		want = []string{LabelWorkload}
	default:
		e := cmprovider.NewMetricNotFoundError(schema.GroupResource{Group: external_metrics.GroupName}, metric)
		e.ErrStatus.Message = fmt.Sprintf("the server could not find the metric %s: capscale serves %s", metric, knownMetrics)
		return external_metrics.ExternalMetricValue{}, e
	}
	lbls, err := parseSelector(metric, selector, want)
	if err != nil {
		return external_metrics.ExternalMetricValue{}, err
	}

	var (
		value float64
		ts    time.Time
	)
	switch metric {
	case names.LoadIndexMetric:
		value, ts, err = p.loadIndex(lbls[LabelSource])
	case names.DesiredReplicasMetric:
		switch lbls[LabelPolicy] {
		case names.PolicyQPS:
			value, ts, err = p.fromWorkload(namespace, lbls[LabelWorkload], desiredForQPS)
		case names.PolicyLoadStep:
			value, ts, err = p.stepDesired(namespace, lbls[LabelWorkload])
		default:
			err = apierrors.NewBadRequest(fmt.Sprintf("metric %s: label %s must be %q or %q, got %q",
				metric, LabelPolicy, names.PolicyQPS, names.PolicyLoadStep, lbls[LabelPolicy]))
		}
	case names.TotalQPSMetric:
		value, ts, err = p.fromWorkload(namespace, lbls[LabelWorkload], totalQPS)
	case names.RealQPSMetric:
		value, ts, err = p.fromWorkload(namespace, lbls[LabelWorkload], realQPS)
	}
	if err != nil {
		return external_metrics.ExternalMetricValue{}, err
	}
	return external_metrics.ExternalMetricValue{
		MetricName:   metric,
		MetricLabels: lbls,
		Timestamp:    metav1.NewTime(ts),
		Value:        quantity(value),
	}, nil
}

// parseSelector accepts only key=value (or key==value) terms for exactly the
// wanted keys.
func parseSelector(metric string, selector labels.Selector, want []string) (map[string]string, error) {
	usage := func(problem string) error {
		keys := make([]string, len(want))
		for i, k := range want {
			keys[i] = k + "=..."
		}
		return apierrors.NewBadRequest(fmt.Sprintf("metric %s needs the label selector %s: %s",
			metric, strings.Join(keys, ","), problem))
	}
	if selector == nil {
		return nil, usage("no selector")
	}
	reqs, selectable := selector.Requirements()
	if !selectable {
		return nil, usage("the selector matches nothing")
	}
	out := make(map[string]string, len(want))
	for _, r := range reqs {
		if op := r.Operator(); op != selection.Equals && op != selection.DoubleEquals {
			return nil, usage(fmt.Sprintf("%q is not an equality (set-based selectors are not supported)", r.String()))
		}
		if r.Values().Len() != 1 {
			return nil, usage(fmt.Sprintf("%q must have exactly one value", r.String()))
		}
		if !contains(want, r.Key()) {
			return nil, usage(fmt.Sprintf("unexpected label %q", r.Key()))
		}
		if _, dup := out[r.Key()]; dup {
			return nil, usage(fmt.Sprintf("label %q given twice", r.Key()))
		}
		out[r.Key()] = r.Values().List()[0]
	}
	var missing []string
	for _, k := range want {
		if _, ok := out[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, usage(fmt.Sprintf("missing label %s", strings.Join(missing, ", ")))
	}
	return out, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (p *Provider) loadIndex(name string) (float64, time.Time, error) {
	r, err := p.readSource(name)
	if err != nil {
		return 0, time.Time{}, err
	}
	return r.Value, r.Time, nil
}

func (p *Provider) readSource(name string) (source.Reading, error) {
	r, err := p.sources.Read(name)
	if err == nil {
		return r, nil
	}
	var ue *source.UnavailableError
	switch {
	case errors.Is(err, source.ErrUnknownSource):
		return source.Reading{}, apierrors.NewNotFound(schema.GroupResource{Group: "capscale.io", Resource: "sources"}, name)
	case errors.As(err, &ue):
		// The HPA treats an error as "hold the current count"; a 503 says
		// the value is temporarily unknown rather than that it is 0.
		return source.Reading{}, apierrors.NewServiceUnavailable(ue.Error())
	default:
		return source.Reading{}, apierrors.NewInternalError(err)
	}
}

// workload is the part of a Deployment or StatefulSet the policies use.
type workload struct {
	kind          string
	namespace     string
	name          string
	annotations   map[string]string
	replicas      int32
	readyReplicas int32
	// replicasChangedAt: see replicasChangedAt.
	replicasChangedAt time.Time
}

func fromDeployment(d *appsv1.Deployment) workload {
	return workload{kind: config.KindDeployment, namespace: d.Namespace, name: d.Name, annotations: d.Annotations,
		replicas: specReplicas(d.Spec.Replicas), readyReplicas: d.Status.ReadyReplicas,
		replicasChangedAt: replicasChangedAt(d.ManagedFields)}
}

func fromStatefulSet(s *appsv1.StatefulSet) workload {
	return workload{kind: config.KindStatefulSet, namespace: s.Namespace, name: s.Name, annotations: s.Annotations,
		replicas: specReplicas(s.Spec.Replicas), readyReplicas: s.Status.ReadyReplicas,
		replicasChangedAt: replicasChangedAt(s.ManagedFields)}
}

// specReplicas applies the API default of 1 for an unset spec.replicas.
func specReplicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func (w workload) String() string { return w.kind + " " + w.namespace + "/" + w.name }

// findWorkload looks up NAME for the QPS metrics, whose selector has no
// kind: a Deployment wins over a StatefulSet of the same name.
func (p *Provider) findWorkload(namespace, name string) (workload, error) {
	if d, err := p.deployments.Deployments(namespace).Get(name); err == nil {
		return fromDeployment(d), nil
	}
	if s, err := p.statefulSets.StatefulSets(namespace).Get(name); err == nil {
		return fromStatefulSet(s), nil
	}
	e := apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "deployments"}, name)
	e.ErrStatus.Message = fmt.Sprintf("no Deployment or StatefulSet %q in namespace %q", name, namespace)
	return workload{}, e
}

func (p *Provider) getWorkload(ref config.WorkloadRef) (workload, error) {
	switch ref.Kind {
	case config.KindStatefulSet:
		s, err := p.statefulSets.StatefulSets(ref.Namespace).Get(ref.Name)
		if err != nil {
			return workload{}, apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, ref.Name)
		}
		return fromStatefulSet(s), nil
	default:
		d, err := p.deployments.Deployments(ref.Namespace).Get(ref.Name)
		if err != nil {
			return workload{}, apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "deployments"}, ref.Name)
		}
		return fromDeployment(d), nil
	}
}

// annotationError turns a qps.AnnotationError into a Status naming the
// workload and the annotation: 404 when it is missing (the workload has no
// such metric), 400 when it is malformed.
func annotationError(w workload, err error) error {
	var ae *qps.AnnotationError
	if !errors.As(err, &ae) {
		return apierrors.NewInternalError(err)
	}
	msg := fmt.Sprintf("%s: %v", w, err)
	if ae.Missing {
		e := apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: strings.ToLower(w.kind) + "s"}, w.name)
		e.ErrStatus.Message = msg
		return e
	}
	return apierrors.NewBadRequest(msg)
}

// fromWorkload finds workload namespace/name and applies rule to it, now:
// the one way from a QPS metric's labels to its value, with a missing or
// malformed annotation turned into a Status by annotationError.
func (p *Provider) fromWorkload(namespace, name string, rule func(workload) (float64, error)) (float64, time.Time, error) {
	w, err := p.findWorkload(namespace, name)
	if err != nil {
		return 0, time.Time{}, err
	}
	v, err := rule(w)
	if err != nil {
		return 0, time.Time{}, annotationError(w, err)
	}
	return v, p.clock.Now(), nil
}

// desiredForQPS is ceil(total-qps / single-pod-qps).
func desiredForQPS(w workload) (float64, error) {
	n, err := qps.DesiredReplicasFromAnnotations(w.annotations)
	return float64(n), err
}

// totalQPS is the total-qps annotation.
func totalQPS(w workload) (float64, error) {
	total, err := qps.ParseTotal(w.annotations)
	return total.Float, err
}

// realQPS is what the ready replicas serve.
func realQPS(w workload) (float64, error) {
	single, err := qps.ParseSinglePod(w.annotations)
	return qps.Real(w.readyReplicas, single), err
}

func (p *Provider) stepDesired(namespace, name string) (float64, time.Time, error) {
	sp, ok := (*p.policies.Load())[namespace+"/"+name]
	if !ok {
		e := apierrors.NewNotFound(schema.GroupResource{Group: "capscale.io", Resource: "steppolicies"}, name)
		e.ErrStatus.Message = fmt.Sprintf("no step policy for workload %q in namespace %q in the adapter's config", name, namespace)
		return 0, time.Time{}, e
	}
	w, err := p.getWorkload(sp.Workload)
	if err != nil {
		return 0, time.Time{}, err
	}
	r, err := p.readSource(sp.Source)
	if err != nil {
		return 0, time.Time{}, err
	}
	created, err := p.podCreationTimes(w)
	if err != nil {
		return 0, time.Time{}, err
	}
	d := policy.Step(policy.StepParams{
		ScaleUpAbove:   sp.ScaleUpAbove,
		ScaleDownBelow: sp.ScaleDownBelow,
		StepUp:         sp.StepUp,
		StepDown:       sp.StepDown,
		MinReplicas:    sp.MinReplicas,
		MaxReplicas:    sp.MaxReplicas,
		MinPodAge:      sp.MinPodAge.Duration,
		Interval:       sp.Interval.Duration,
	}, policy.StepInput{
		Current:          w.replicas,
		Load:             r.Value,
		PodCreationTimes: created,
		Now:              p.clock.Now(),
		LastScaleTime:    p.lastScaleTime(w),
	})
	klog.V(4).InfoS("Load-step decision", "workload", klog.KRef(w.namespace, w.name), "kind", w.kind,
		"load", r.Value, "current", w.replicas, "desired", d.Desired, "reason", d.Reason)
	return float64(d.Desired), r.Time, nil
}

// podWorkloadIndex indexes pods by the Deployment or StatefulSet that owns
// them.
const podWorkloadIndex = "capscale.io/workload"

func workloadIndexKey(namespace, kind, name string) string {
	return namespace + "/" + kind + "/" + name
}

// podWorkloadKeys indexes a pod under the workload podWorkload found for it.
func podWorkloadKeys(obj any) ([]string, error) {
	pod, ok := asPodRecord(obj)
	if !ok || pod.Workload == "" {
		return nil, nil
	}
	return []string{pod.Workload}, nil
}

// podCreationTimes lists the creation times of the workload's live pods
// (not terminating, not finished) from the pod cache.
func (p *Provider) podCreationTimes(w workload) ([]time.Time, error) {
	objs, err := p.podIndexer.ByIndex(podWorkloadIndex, workloadIndexKey(w.namespace, w.kind, w.name))
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("listing pods of %s: %w", w, err))
	}
	out := make([]time.Time, 0, len(objs))
	for _, o := range objs {
		pod, ok := asPodRecord(o)
		if !ok || pod.DeletionTimestamp != nil || pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, pod.CreationTimestamp.Time)
	}
	return out, nil
}

// lastScaleTime is the newer of the workload's replicasChangedAt and the
// status.lastScaleTime of the HPAs targeting it. Both come from the cluster,
// not from this process's memory, so every adapter replica, however long it
// has run, holds the same interval (docs/metrics-adapter.md, "Running more than one replica").
func (p *Provider) lastScaleTime(w workload) time.Time {
	last := w.replicasChangedAt
	if hpas, err := p.hpas.HorizontalPodAutoscalers(w.namespace).List(labels.Everything()); err == nil {
		for _, h := range hpas {
			ref := h.Spec.ScaleTargetRef
			gv, err := schema.ParseGroupVersion(ref.APIVersion)
			if err != nil || gv.Group != appsv1.GroupName || ref.Kind != w.kind || ref.Name != w.name {
				continue
			}
			if h.Status.LastScaleTime != nil && h.Status.LastScaleTime.After(last) {
				last = h.Status.LastScaleTime.Time
			}
		}
	}
	return last
}

// quantity renders v with micro precision (the HPA compares milli-values);
// values too large for that are rounded to integers.
func quantity(v float64) resource.Quantity {
	if math.Abs(v) < 9e12 {
		return *resource.NewScaledQuantity(int64(math.Round(v*1e6)), resource.Micro)
	}
	if v >= math.MaxInt64 {
		return *resource.NewQuantity(math.MaxInt64, resource.DecimalSI)
	}
	return *resource.NewQuantity(int64(math.Round(v)), resource.DecimalSI)
}

func statusCode(err error) int32 {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Code
	}
	return 500
}
