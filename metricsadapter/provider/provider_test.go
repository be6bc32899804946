package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/metricsadapter/config"
	"github.com/capscale/capscale/metricsadapter/source"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// fakeSources serves fixed readings.
type fakeSources map[string]func() (source.Reading, error)

func (f fakeSources) Read(name string) (source.Reading, error) {
	r, ok := f[name]
	if !ok {
		return source.Reading{}, fmt.Errorf("%w %q", source.ErrUnknownSource, name)
	}
	return r()
}

func reading(v float64, at time.Time) func() (source.Reading, error) {
	return func() (source.Reading, error) { return source.Reading{Value: v, Time: at}, nil }
}

func int32p(i int32) *int32 { return &i }

func deployment(ns, name string, replicas, ready int32, ann map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
		Spec: appsv1.DeploymentSpec{
			Replicas: int32p(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
		Status: appsv1.DeploymentStatus{ReadyReplicas: ready},
	}
}

func statefulSet(ns, name string, replicas, ready int32, ann map[string]string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
		Spec: appsv1.StatefulSetSpec{
			Replicas: int32p(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
		Status: appsv1.StatefulSetStatus{ReadyReplicas: ready},
	}
}

// pod is a pod of Deployment app, owned by its ReplicaSet app-h1.
func pod(ns, app, name string, age time.Duration) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name,
		Labels:            map[string]string{"app": app, appsv1.DefaultDeploymentUniqueLabelKey: "h1"},
		CreationTimestamp: metav1.NewTime(now.Add(-age)),
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-h1", UID: "rs-" + types.UID(app), Controller: ptrTrue(),
		}},
	}}
}

// stsPod is a pod owned by StatefulSet app.
func stsPod(ns, app, name string, age time.Duration) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, Labels: map[string]string{"app": app},
		CreationTimestamp: metav1.NewTime(now.Add(-age)),
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "StatefulSet", Name: app, UID: "sts-" + types.UID(app), Controller: ptrTrue(),
		}},
	}}
}

func ptrTrue() *bool { b := true; return &b }

func hpa(ns, name, kind, target string, lastScale *time.Time) *autoscalingv2.HorizontalPodAutoscaler {
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: kind, Name: target},
			MaxReplicas:    20,
		},
	}
	if lastScale != nil {
		t := metav1.NewTime(*lastScale)
		h.Status.LastScaleTime = &t
	}
	return h
}

func qpsAnn(total, single string) map[string]string {
	return map[string]string{names.TotalQPSAnnotation: total, names.SinglePodQPSAnnotation: single}
}

func gpuPolicy(ns, kind, name string) config.StepPolicy {
	return config.StepPolicy{
		Workload:       config.WorkloadRef{Namespace: ns, Kind: kind, Name: name},
		Source:         "gpu-load",
		ScaleUpAbove:   0.8,
		ScaleDownBelow: 0.5,
		StepUp:         3,
		StepDown:       1,
		MinReplicas:    0,
		MaxReplicas:    20,
		MinPodAge:      metav1.Duration{Duration: 10 * time.Minute},
		Interval:       metav1.Duration{Duration: 5 * time.Minute},
	}
}

// newTestProvider fills the informer caches directly (no watch needed for
// lister reads) and returns a provider over them.
// Objects go through the provider's cache transform first, as the
// informers would put them.
func newTestProvider(t testing.TB, sources SourceReader, objs ...runtime.Object) (*Provider, *clocktesting.FakeClock) {
	t.Helper()
	return newTestProviderWith(t, sources, compactObject, objs...)
}

// newTestProviderWith stores transform(obj) for each object.
func newTestProviderWith(t testing.TB, sources SourceReader, transform cache.TransformFunc, objs ...runtime.Object) (*Provider, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(now)
	factory := kube.InformerFactory(fake.NewClientset())
	p, err := New(Options{Informers: factory, Sources: sources, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		stored, err := transform(o.DeepCopyObject())
		if err != nil {
			t.Fatal(err)
		}
		if err := indexerFor(factory, o).Add(stored); err != nil {
			t.Fatal(err)
		}
	}
	return p, clk
}

type cacheIndexer interface{ Add(any) error }

func indexerFor(f informers.SharedInformerFactory, o runtime.Object) cacheIndexer {
	switch o.(type) {
	case *appsv1.Deployment:
		return f.Apps().V1().Deployments().Informer().GetIndexer()
	case *appsv1.StatefulSet:
		return f.Apps().V1().StatefulSets().Informer().GetIndexer()
	case *corev1.Pod:
		return f.Core().V1().Pods().Informer().GetIndexer()
	case *autoscalingv2.HorizontalPodAutoscaler:
		return f.Autoscaling().V2().HorizontalPodAutoscalers().Informer().GetIndexer()
	default:
		panic(fmt.Sprintf("no indexer for %T", o))
	}
}

// scenarioSources serves the readings of TestGetExternalMetric's scenario.
func scenarioSources(sampled time.Time) fakeSources {
	return fakeSources{
		"gpu-load":  reading(0.83, sampled),
		"idle-load": reading(0.2, sampled),
		"down": func() (source.Reading, error) {
			return source.Reading{}, &source.UnavailableError{Source: "down", Never: true, LastError: "timeout"}
		},
	}
}

// scenarioObjects are the workloads, pods and HPAs of TestGetExternalMetric.
func scenarioObjects() []runtime.Object {
	recentScale := now.Add(-2 * time.Minute)
	oldScale := now.Add(-time.Hour)
	return []runtime.Object{
		deployment("web", "shop", 2, 2, qpsAnn("800", "500")),
		deployment("web", "big", 2, 3, qpsAnn("1800", "500")),
		deployment("web", "zero-single", 1, 1, qpsAnn("800", "0")),
		deployment("web", "bad-total", 1, 1, qpsAnn("lots", "500")),
		deployment("web", "plain", 1, 1, nil),
		statefulSet("web", "db", 3, 2, qpsAnn("250", "100")),
		statefulSet("web", "shop", 9, 9, qpsAnn("1", "1")), // the Deployment wins
		// load-step workloads, one per situation
		deployment("ai", "gpu", 4, 4, nil),
		pod("ai", "gpu", "gpu-1", time.Hour),
		pod("ai", "gpu", "gpu-2", time.Hour),
		deployment("ai", "young", 4, 4, nil),
		pod("ai", "young", "young-1", time.Hour),
		pod("ai", "young", "young-2", time.Minute),
		deployment("ai", "cooling", 4, 4, nil),
		hpa("ai", "cooling", "Deployment", "cooling", &recentScale),
		deployment("ai", "warm", 4, 4, nil),
		hpa("ai", "warm", "Deployment", "warm", &oldScale),
		statefulSet("ai", "trainer", 19, 19, nil),
		// A young pod that merely matches warm's labels is not warm's pod.
		func() runtime.Object {
			p := pod("ai", "warm", "stray", time.Minute)
			p.OwnerReferences = nil
			return p
		}(),
		// A finished young pod and a terminating one do not block either.
		func() runtime.Object {
			p := pod("ai", "warm", "done", time.Minute)
			p.Status.Phase = corev1.PodSucceeded
			return p
		}(),
		func() runtime.Object {
			p := pod("ai", "warm", "leaving", time.Minute)
			p.DeletionTimestamp = &metav1.Time{Time: now}
			return p
		}(),
		statefulSet("ai", "db", 4, 4, nil),
		stsPod("ai", "db", "db-0", time.Hour),
		stsPod("ai", "db", "db-1", time.Minute),
		deployment("ai", "stale", 4, 4, nil),
	}
}

// scenarioPolicies are the step policies of TestGetExternalMetric.
func scenarioPolicies() []config.StepPolicy {
	return []config.StepPolicy{
		gpuPolicy("ai", "Deployment", "gpu"),
		withSource(gpuPolicy("ai", "Deployment", "young"), "idle-load"),
		gpuPolicy("ai", "Deployment", "cooling"),
		withSource(gpuPolicy("ai", "Deployment", "warm"), "idle-load"),
		gpuPolicy("ai", "StatefulSet", "trainer"),
		withSource(gpuPolicy("ai", "Deployment", "stale"), "down"),
		withSource(gpuPolicy("ai", "StatefulSet", "db"), "idle-load"),
		gpuPolicy("ai", "Deployment", "missing"),
	}
}

func TestGetExternalMetric(t *testing.T) {
	sampled := now.Add(-20 * time.Second)
	sources := scenarioSources(sampled)
	p, _ := newTestProvider(t, sources, scenarioObjects()...)
	p.SetStepPolicies(scenarioPolicies())

	tests := []struct {
		name      string
		namespace string
		metric    string
		selector  string
		wantValue string
		wantTime  time.Time // zero: the evaluation time
		wantCode  int32
		wantMsg   string
	}{
		{name: "load index", namespace: "any", metric: names.LoadIndexMetric, selector: "source=gpu-load", wantValue: "830m", wantTime: sampled},
		{name: "load index with ==", namespace: "any", metric: names.LoadIndexMetric, selector: "source==gpu-load", wantValue: "830m", wantTime: sampled},
		{name: "load index unknown source", namespace: "any", metric: names.LoadIndexMetric, selector: "source=nope", wantCode: 404, wantMsg: `sources.capscale.io "nope" not found`},
		{name: "load index stale source", namespace: "any", metric: names.LoadIndexMetric, selector: "source=down", wantCode: 503, wantMsg: "has no good sample yet; last poll failed: timeout"},
		{name: "load index without selector", namespace: "any", metric: names.LoadIndexMetric, selector: "", wantCode: 400, wantMsg: "missing label source"},
		{name: "load index extra label", namespace: "any", metric: names.LoadIndexMetric, selector: "source=gpu-load,zone=a", wantCode: 400, wantMsg: `unexpected label "zone"`},
		{name: "load index set-based", namespace: "any", metric: names.LoadIndexMetric, selector: "source in (gpu-load)", wantCode: 400, wantMsg: "set-based"},
		{name: "load index inequality", namespace: "any", metric: names.LoadIndexMetric, selector: "source!=gpu-load", wantCode: 400, wantMsg: "not an equality"},
		{name: "load index existence", namespace: "any", metric: names.LoadIndexMetric, selector: "source", wantCode: 400, wantMsg: "not an equality"},

		{name: "qps 800/500", namespace: "web", metric: names.DesiredReplicasMetric, selector: "workload=shop,policy=qps", wantValue: "2"},
		{name: "qps 1800/500", namespace: "web", metric: names.DesiredReplicasMetric, selector: "policy=qps,workload=big", wantValue: "4"},
		{name: "qps on a StatefulSet", namespace: "web", metric: names.DesiredReplicasMetric, selector: "workload=db,policy=qps", wantValue: "3"},
		{name: "qps single zero", namespace: "web", metric: names.DesiredReplicasMetric, selector: "workload=zero-single,policy=qps", wantCode: 400, wantMsg: "annotation capscale.io/single-pod-qps=\"0\": must be greater than 0"},
		{name: "qps total not a number", namespace: "web", metric: names.DesiredReplicasMetric, selector: "workload=bad-total,policy=qps", wantCode: 400, wantMsg: "capscale.io/total-qps"},
		{name: "qps without annotations", namespace: "web", metric: names.DesiredReplicasMetric, selector: "workload=plain,policy=qps", wantCode: 404, wantMsg: "annotation capscale.io/single-pod-qps is not set"},
		{name: "qps unknown workload", namespace: "web", metric: names.DesiredReplicasMetric, selector: "workload=ghost,policy=qps", wantCode: 404, wantMsg: `no Deployment or StatefulSet "ghost" in namespace "web"`},
		{name: "qps wrong namespace", namespace: "other", metric: names.DesiredReplicasMetric, selector: "workload=shop,policy=qps", wantCode: 404},
		{name: "unknown policy", namespace: "web", metric: names.DesiredReplicasMetric, selector: "workload=shop,policy=magic", wantCode: 400, wantMsg: `label policy must be "qps" or "load-step", got "magic"`},
		{name: "desired without policy", namespace: "web", metric: names.DesiredReplicasMetric, selector: "workload=shop", wantCode: 400, wantMsg: "missing label policy"},

		{name: "total qps", namespace: "web", metric: names.TotalQPSMetric, selector: "workload=shop", wantValue: "800"},
		{name: "total qps rejects policy label", namespace: "web", metric: names.TotalQPSMetric, selector: "workload=shop,policy=qps", wantCode: 400},
		{name: "real qps", namespace: "web", metric: names.RealQPSMetric, selector: "workload=big", wantValue: "1500"},
		{name: "real qps StatefulSet", namespace: "web", metric: names.RealQPSMetric, selector: "workload=db", wantValue: "200"},

		{name: "load-step scales up", namespace: "ai", metric: names.DesiredReplicasMetric, selector: "workload=gpu,policy=load-step", wantValue: "7", wantTime: sampled},
		{name: "load-step young pod holds", namespace: "ai", metric: names.DesiredReplicasMetric, selector: "workload=young,policy=load-step", wantValue: "4", wantTime: sampled},
		{name: "load-step within interval of the HPA's lastScaleTime holds", namespace: "ai", metric: names.DesiredReplicasMetric, selector: "workload=cooling,policy=load-step", wantValue: "4", wantTime: sampled},
		{name: "load-step after the interval scales down", namespace: "ai", metric: names.DesiredReplicasMetric, selector: "workload=warm,policy=load-step", wantValue: "3", wantTime: sampled},
		{name: "load-step StatefulSet capped at max", namespace: "ai", metric: names.DesiredReplicasMetric, selector: "workload=trainer,policy=load-step", wantValue: "20", wantTime: sampled},
		{name: "load-step young StatefulSet pod holds", namespace: "ai", metric: names.DesiredReplicasMetric, selector: "workload=db,policy=load-step", wantValue: "4", wantTime: sampled},
		{name: "load-step stale source is an error, not 0", namespace: "ai", metric: names.DesiredReplicasMetric, selector: "workload=stale,policy=load-step", wantCode: 503},
		{name: "load-step policy's workload missing", namespace: "ai", metric: names.DesiredReplicasMetric, selector: "workload=missing,policy=load-step", wantCode: 404, wantMsg: `deployments.apps "missing" not found`},
		{name: "load-step no policy for workload", namespace: "ai", metric: names.DesiredReplicasMetric, selector: "workload=other,policy=load-step", wantCode: 404, wantMsg: "no step policy"},
		{name: "load-step namespace must match the policy", namespace: "web", metric: names.DesiredReplicasMetric, selector: "workload=gpu,policy=load-step", wantCode: 404, wantMsg: "no step policy"},

		{name: "unknown metric", namespace: "web", metric: "cpu-magic", selector: "workload=shop", wantCode: 404, wantMsg: "could not find the metric cpu-magic: capscale serves capscale-load-index, capscale-desired-replicas"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := labels.Parse(tc.selector)
			if err != nil {
				t.Fatalf("parsing selector: %v", err)
			}
			list, err := p.GetExternalMetric(context.Background(), tc.namespace, sel, cmprovider.ExternalMetricInfo{Metric: tc.metric})
			if tc.wantCode != 0 {
				var st apierrors.APIStatus
				if !errors.As(err, &st) || st.Status().Code != tc.wantCode {
					t.Fatalf("err = %v, want status %d", err, tc.wantCode)
				}
				if !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("err = %q, want it to contain %q", err, tc.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(list.Items) != 1 {
				t.Fatalf("got %d items, want exactly 1", len(list.Items))
			}
			item := list.Items[0]
			if got := item.Value.String(); got != tc.wantValue {
				t.Errorf("value = %s, want %s", got, tc.wantValue)
			}
			wantTime := tc.wantTime
			if wantTime.IsZero() {
				wantTime = now
			}
			if !item.Timestamp.Time.Equal(wantTime) {
				t.Errorf("timestamp = %v, want %v", item.Timestamp.Time, wantTime)
			}
			if item.MetricName != tc.metric {
				t.Errorf("metric name = %q", item.MetricName)
			}
			want, _ := labels.ConvertSelectorToLabelsMap(strings.ReplaceAll(tc.selector, "==", "="))
			if !labels.Equals(labels.Set(item.MetricLabels), want) {
				t.Errorf("labels = %v, want %v", item.MetricLabels, want)
			}
		})
	}
}

func withSource(sp config.StepPolicy, src string) config.StepPolicy {
	sp.Source = src
	return sp
}

func TestGetExternalMetricNilSelector(t *testing.T) {
	p, _ := newTestProvider(t, fakeSources{})
	_, err := p.GetExternalMetric(context.Background(), "ns", nil, cmprovider.ExternalMetricInfo{Metric: names.LoadIndexMetric})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("nil selector: err = %v, want BadRequest", err)
	}
}

func TestListAllExternalMetrics(t *testing.T) {
	p, _ := newTestProvider(t, fakeSources{})
	got := p.ListAllExternalMetrics()
	var metricNames []string
	for _, i := range got {
		metricNames = append(metricNames, i.Metric)
	}
	want := "capscale-load-index,capscale-desired-replicas,capscale-total-qps,capscale-real-qps"
	if strings.Join(metricNames, ",") != want {
		t.Errorf("metrics = %v, want %s", metricNames, want)
	}
	if testing.AllocsPerRun(10, func() { _ = p.ListAllExternalMetrics() }) != 0 {
		t.Error("ListAllExternalMetrics allocates; it runs on every discovery request")
	}
}

func TestStepPolicyReload(t *testing.T) {
	p, _ := newTestProvider(t, fakeSources{"gpu-load": reading(0.9, now)}, deployment("ai", "gpu", 4, 4, nil))
	get := func() error {
		sel := labels.SelectorFromSet(labels.Set{"workload": "gpu", "policy": "load-step"})
		_, err := p.GetExternalMetric(context.Background(), "ai", sel, cmprovider.ExternalMetricInfo{Metric: names.DesiredReplicasMetric})
		return err
	}
	if err := get(); !apierrors.IsNotFound(err) {
		t.Fatalf("before the policy: %v, want NotFound", err)
	}
	p.SetStepPolicies([]config.StepPolicy{gpuPolicy("ai", "Deployment", "gpu")})
	if err := get(); err != nil {
		t.Fatalf("after adding the policy: %v", err)
	}
	p.SetStepPolicies(nil)
	if err := get(); !apierrors.IsNotFound(err) {
		t.Fatalf("after removing the policy: %v, want NotFound", err)
	}
}

// TestReplicasAgreeOnLastScale: the interval starts at the spec.replicas
// change the apiserver recorded in managedFields (the fake clientset runs the
// real field manager), not when a process saw it, so an adapter replica
// started after the change holds the interval like one that watched it.
func TestReplicasAgreeOnLastScale(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	dep := deployment("ai", "gpu", 4, 4, nil)
	dep.ManagedFields = []metav1.ManagedFieldsEntry{replicasOwner("creator", start.Add(-time.Hour))}
	cs := fake.NewClientset(dep, pod("ai", "gpu", "gpu-1", 0))
	clk := clocktesting.NewFakeClock(start)
	replica := func() *Provider {
		t.Helper()
		factory := kube.InformerFactory(cs)
		p, err := New(Options{Informers: factory, Sources: fakeSources{"gpu-load": reading(0.9, start)}, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		p.SetStepPolicies([]config.StepPolicy{gpuPolicy("ai", "Deployment", "gpu")})
		factory.Start(ctx.Done())
		t.Cleanup(factory.Shutdown)
		waitFor(t, p.HasSynced)
		return p
	}
	desired := func(p *Provider) string {
		t.Helper()
		sel := labels.SelectorFromSet(labels.Set{"workload": "gpu", "policy": "load-step"})
		l, err := p.GetExternalMetric(ctx, "ai", sel, cmprovider.ExternalMetricInfo{Metric: names.DesiredReplicasMetric})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items[0].Value.String()
	}

	a := replica()
	if got := desired(a); got != "7" {
		t.Fatalf("an hour after the last change: desired = %s, want 7", got)
	}
	// Someone (kubectl scale, KEDA's activation) scales without an HPA.
	d, err := cs.AppsV1().Deployments("ai").Get(ctx, "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = int32p(7)
	if _, err := cs.AppsV1().Deployments("ai").Update(ctx, d, metav1.UpdateOptions{FieldManager: "kubectl"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		d, err := a.deployments.Deployments("ai").Get("gpu")
		return err == nil && *d.Spec.Replicas == 7
	})
	b := replica()
	for name, p := range map[string]*Provider{"replica that saw the change": a, "replica started after it": b} {
		if got := desired(p); got != "7" {
			t.Errorf("%s, right after the change: desired = %s, want 7 (held for the interval)", name, got)
		}
	}
	clk.Step(5*time.Minute + time.Second)
	for name, p := range map[string]*Provider{"replica that saw the change": a, "replica started after it": b} {
		if got := desired(p); got != "10" {
			t.Errorf("%s, one interval later: desired = %s, want 10", name, got)
		}
	}
}

// replicasOwner is a managedFields entry owning spec.replicas, changed at at.
func replicasOwner(manager string, at time.Time) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1",
		Time: &metav1.Time{Time: at}, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:replicas":{},"f:template":{}}}`),
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRealQPSGauge(t *testing.T) {
	p, _ := newTestProvider(t, fakeSources{},
		deployment("web", "shop", 2, 2, qpsAnn("800", "500")),
		statefulSet("web", "shop", 9, 9, qpsAnn("1", "1")),
		statefulSet("web", "db", 3, 2, qpsAnn("250", "100")),
		deployment("web", "broken", 2, 2, qpsAnn("800", "x")),
		deployment("web", "plain", 2, 2, nil),
	)
	reg := prometheus.NewPedanticRegistry()
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP capscale_adapter_real_qps QPS the ready replicas of a workload can serve (ready replicas x capscale.io/single-pod-qps); only workloads with a valid annotation.
# TYPE capscale_adapter_real_qps gauge
capscale_adapter_real_qps{namespace="web",workload="db"} 200
capscale_adapter_real_qps{namespace="web",workload="shop"} 1000
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "capscale_adapter_real_qps"); err != nil {
		t.Error(err)
	}
}

func TestRequestMetrics(t *testing.T) {
	p, _ := newTestProvider(t, fakeSources{"gpu-load": reading(0.5, now)})
	reg := prometheus.NewPedanticRegistry()
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ metric, sel string }{
		{names.LoadIndexMetric, "source=gpu-load"},
		{names.LoadIndexMetric, "source=nope"},
		{"made-up-" + strings.Repeat("x", 10), "a=b"},
	} {
		sel, _ := labels.Parse(m.sel)
		_, _ = p.GetExternalMetric(context.Background(), "ns", sel, cmprovider.ExternalMetricInfo{Metric: m.metric})
	}
	want := `
# HELP capscale_adapter_requests_total External-metric requests answered by the provider, by metric and HTTP status code.
# TYPE capscale_adapter_requests_total counter
capscale_adapter_requests_total{code="200",metric="capscale-load-index"} 1
capscale_adapter_requests_total{code="404",metric="capscale-load-index"} 1
capscale_adapter_requests_total{code="404",metric="unknown"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "capscale_adapter_requests_total"); err != nil {
		t.Error(err)
	}
}
