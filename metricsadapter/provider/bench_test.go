package provider

import (
	"context"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/metricsadapter/config"
)

// BenchmarkGetExternalMetric answers requests round-robin over 1000 series of
// each metric kind, all served from caches.
func BenchmarkGetExternalMetric(b *testing.B) {
	const n = 1000
	sources := fakeSources{}
	var objs []runtime.Object
	var policies []config.StepPolicy
	for i := 0; i < n; i++ {
		src := fmt.Sprintf("src-%d", i)
		sources[src] = reading(float64(i%100)/100, now.Add(-10*time.Second))
		objs = append(objs, deployment("web", fmt.Sprintf("web-%d", i), 2, 2, qpsAnn("800", "500")))
		gpu := fmt.Sprintf("gpu-%d", i)
		objs = append(objs, deployment("ai", gpu, 4, 4, nil),
			pod("ai", gpu, gpu+"-a", time.Hour), pod("ai", gpu, gpu+"-b", time.Hour), pod("ai", gpu, gpu+"-c", time.Minute))
		if i%10 == 0 {
			recent := now.Add(-time.Minute)
			objs = append(objs, hpa("ai", gpu, "Deployment", gpu, &recent))
		}
		sp := gpuPolicy("ai", "Deployment", gpu)
		sp.Source = src
		policies = append(policies, sp)
	}
	p, _ := newTestProvider(b, sources, objs...)
	p.SetStepPolicies(policies)

	type req struct {
		ns  string
		sel labels.Selector
	}
	series := func(ns string, f func(i int) labels.Set) []req {
		out := make([]req, n)
		for i := range out {
			out[i] = req{ns, labels.SelectorFromSet(f(i))}
		}
		return out
	}
	cases := []struct {
		name   string
		metric string
		reqs   []req
	}{
		{"load-index", names.LoadIndexMetric, series("web", func(i int) labels.Set { return labels.Set{"source": fmt.Sprintf("src-%d", i)} })},
		{"qps", names.DesiredReplicasMetric, series("web", func(i int) labels.Set {
			return labels.Set{"workload": fmt.Sprintf("web-%d", i), "policy": "qps"}
		})},
		{"load-step", names.DesiredReplicasMetric, series("ai", func(i int) labels.Set {
			return labels.Set{"workload": fmt.Sprintf("gpu-%d", i), "policy": "load-step"}
		})},
		{"real-qps", names.RealQPSMetric, series("web", func(i int) labels.Set { return labels.Set{"workload": fmt.Sprintf("web-%d", i)} })},
	}
	ctx := context.Background()
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			info := cmprovider.ExternalMetricInfo{Metric: c.metric}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := c.reqs[i%n]
				i++
				if _, err := p.GetExternalMetric(ctx, r.ns, r.sel, info); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPodCache reports the live heap one cached pod costs, full (as
// informers stored it before the transform) and as a podRecord: 10,000 pods
// of Deployments, each as the API returns it (a container with requests,
// labels, an owner reference, a scheduled status, managedFields dropped by
// the factory's transform).
func BenchmarkPodCache(b *testing.B) {
	const n = 10000
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		p := pod("ns", fmt.Sprintf("app-%d", i/10), fmt.Sprintf("app-%d-%05d", i/10, i), time.Hour)
		p.UID = types.UID(fmt.Sprintf("0b9f3e4a-5c7d-4e2f-9a1b-%012d", i))
		p.ResourceVersion = fmt.Sprint(100000 + i)
		p.Spec = corev1.PodSpec{
			NodeName: fmt.Sprintf("node-%04d", i/10), SchedulerName: "default-scheduler", RestartPolicy: corev1.RestartPolicyAlways,
			ServiceAccountName: "default", DNSPolicy: corev1.DNSClusterFirst, TerminationGracePeriodSeconds: ptr.To(int64(30)),
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/memory:1", ImagePullPolicy: corev1.PullIfNotPresent,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{names.UnderlayIPResource: resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("10m")},
					Limits:   corev1.ResourceList{names.UnderlayIPResource: resource.MustParse("1")},
				},
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
			},
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", HostIP: "192.168.0.1", QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}
		pods[i] = p
	}
	for _, tc := range []struct {
		name      string
		transform cache.TransformFunc
	}{
		{"full", func(o any) (any, error) { return o, nil }},
		{"record", compactObject},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var perPod float64
			for b.Loop() {
				goruntime.GC()
				var before, after goruntime.MemStats
				goruntime.ReadMemStats(&before)
				// Each pod as an informer decodes it, then what the cache keeps.
				src := make([]*corev1.Pod, n)
				for i, p := range pods {
					src[i] = p.DeepCopy()
				}
				idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{podWorkloadIndex: podWorkloadKeys})
				for i := range src {
					o, _ := tc.transform(src[i])
					src[i] = nil // the decoded pod is garbage once transformed
					_ = idx.Add(o)
				}
				goruntime.GC()
				goruntime.ReadMemStats(&after)
				perPod = float64(after.HeapAlloc-before.HeapAlloc) / n
				goruntime.KeepAlive(idx)
			}
			b.ReportMetric(perPod, "B/pod-live")
		})
	}
}
