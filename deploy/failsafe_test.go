package deploy

import (
	"fmt"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/internal/names"
)

// podPolicies are the four MutatingAdmissionPolicies that give pods an
// underlay IP or capscale-scheduler.
var podPolicies = []string{"capscale-underlay-ip", "capscale-underlay-scheduler", "capscale-draws-all-ip", "capscale-draws-all-scheduler"}

// TestPoliciesFailSafe (issue 55 §1, §2): the chart's and deploy/'s pod
// policies, run by kube-apiserver's own admission code (admitter) in every
// order kube-apiserver may run them, with a capacity source that draws all
// and a namespace marked capscale.io/underlay=true:
//   - pods in kube-system and in capscale's own namespace, and pods of the
//     system-cluster-critical and system-node-critical priority classes,
//     keep default-scheduler and get no IP: nothing the cluster needs to
//     recover waits on capscale-scheduler;
//   - a pod of another scheduler gets neither mutation (an IP request would
//     fail its NodeResourcesFit on every node);
//   - an app pod gets the IP exactly when it ends up on a scheduler that
//     counts it: capscale-scheduler wherever the routing policy runs,
//     default-scheduler where it counts the IP itself.
func TestPoliciesFailSafe(t *testing.T) {
	const (
		capscale = "capscale-scheduler"
		dflt     = "default-scheduler"
	)
	sources := []string{"--set", "controller.capacitySources.enabled=true"}
	type install struct {
		name string
		// render returns the objects and capscale's namespace.
		render func(t *testing.T) (rendered, string)
		// routes: default-scheduler pods move to capscale-scheduler;
		// defaultCounts: otherwise default-scheduler counts the IP itself.
		routes, defaultCounts bool
	}
	chart := func(args ...string) func(t *testing.T) (rendered, string) {
		return func(t *testing.T) (rendered, string) {
			r, err := helmTemplate(t, append(append([]string{}, sources...), args...)...)
			if err != nil {
				t.Fatal(err)
			}
			ns := "capscale-system"
			for i, a := range args {
				if a == "--namespace" && len(args) > i+1 {
					ns = args[i+1]
				}
			}
			return r, ns
		}
	}
	installs := []install{
		{name: "deploy/ with capacity-sources", render: func(t *testing.T) (rendered, string) { return kustomizeCapacitySources(t), "capscale-system" }, routes: true},
		{name: "chart plugin mode", render: chart("--set", "extender.mode=plugin"), routes: true},
		{name: "chart extender mode", render: chart("--set", "extender.mode=extender"), routes: true},
		{name: "chart native mode", render: chart("--set", "extender.mode=native"), routes: true},
		{name: "chart in namespace ops", render: chart("--namespace", "ops"), routes: true},
		{name: "chart plugin mode without routing", render: chart("--set", "extender.mode=plugin", "--set", "admissionPolicies.schedulerName=false")},
		{name: "chart native mode without routing", render: chart("--set", "extender.mode=native", "--set", "admissionPolicies.schedulerName=false"), defaultCounts: true},
	}
	for _, in := range installs {
		t.Run(in.name, func(t *testing.T) {
			r, own := in.render(t)
			var policies []*admissionv1.MutatingAdmissionPolicy
			for _, name := range podPolicies {
				if _, ok := r[objectKey("MutatingAdmissionPolicy", "", name)]; !ok {
					continue
				}
				if _, ok := r[objectKey("MutatingAdmissionPolicyBinding", "", name)]; !ok {
					t.Fatalf("%s has no binding", name)
				}
				policies = append(policies, get[*admissionv1.MutatingAdmissionPolicy](t, r, objectKey("MutatingAdmissionPolicy", "", name)))
			}
			want := 2
			if in.routes {
				want = 4
			}
			if len(policies) != want {
				t.Errorf("%d of the pod policies rendered, want %d", len(policies), want)
			}
			a := newAdmitter(t, policies,
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: own}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{names.UnderlayNamespaceLabel: "true"}}},
			)
			// An app pod on default-scheduler: moved and given an IP where
			// the routing runs, given one where default-scheduler counts it,
			// else left alone.
			appScheduler, appIP := dflt, ""
			switch {
			case in.routes:
				appScheduler, appIP = capscale, "1"
			case in.defaultCounts:
				appIP = "1"
			}
			for _, tc := range []struct {
				name    string
				pod     *corev1.Pod
				wantSch string
				wantIP  string
			}{
				{name: "kube-system", pod: policyPod("kube-system", "coredns", dflt), wantSch: dflt},
				{name: "kube-system on capscale-scheduler", pod: policyPod("kube-system", "x", capscale), wantSch: capscale},
				{name: "capscale's own namespace", pod: policyPod(own, "capscale-scheduler-abc", dflt), wantSch: dflt},
				{name: "system-cluster-critical", pod: withPriority(policyPod("apps", "karpenter", dflt), "system-cluster-critical"), wantSch: dflt},
				{name: "system-node-critical, marked namespace", pod: withPriority(policyPod("shop", "agent", dflt), "system-node-critical"), wantSch: dflt},
				{name: "another scheduler", pod: policyPod("apps", "batch", "volcano"), wantSch: "volcano"},
				{name: "another scheduler, marked namespace", pod: policyPod("shop", "batch", "volcano"), wantSch: "volcano"},
				{name: "hostNetwork", pod: withHostNetwork(policyPod("apps", "exporter", dflt)), wantSch: dflt},
				{name: "app", pod: policyPod("apps", "web", dflt), wantSch: appScheduler, wantIP: appIP},
				{name: "app, marked namespace", pod: policyPod("shop", "web", dflt), wantSch: appScheduler, wantIP: appIP},
				{name: "app on capscale-scheduler", pod: policyPod("apps", "api", capscale), wantSch: capscale, wantIP: "1"},
				{name: "app asking for 2", pod: withIP(policyPod("apps", "db", dflt), "2"), wantSch: map[bool]string{true: capscale, false: dflt}[in.routes], wantIP: "2"},
			} {
				for _, order := range permutations(len(policies)) {
					got := a.admit(t, tc.pod, order)
					ip := ""
					if q, ok := got.Spec.Containers[0].Resources.Requests[names.UnderlayIPResource]; ok {
						ip = q.String()
					}
					if got.Spec.SchedulerName != tc.wantSch || ip != tc.wantIP {
						var run []string
						for _, i := range order {
							run = append(run, policies[i].Name)
						}
						t.Errorf("%s (%s/%s, %s): scheduler %q, IP %q; want %q, %q (policies run %v)",
							tc.name, tc.pod.Namespace, tc.pod.Name, tc.pod.Spec.SchedulerName, got.Spec.SchedulerName, ip, tc.wantSch, tc.wantIP, run)
						break
					}
				}
			}
		})
	}
}

// policyPod is a pod of one container that asks for nothing, on scheduler
// (the API server has defaulted it, as before any admission).
func policyPod(ns, name, scheduler string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			SchedulerName: scheduler,
			Containers:    []corev1.Container{{Name: "app", Image: fmt.Sprintf("registry.example/%s:1", name)}},
		},
	}
}

func withPriority(p *corev1.Pod, class string) *corev1.Pod {
	p.Spec.PriorityClassName = class
	return p
}

func withHostNetwork(p *corev1.Pod) *corev1.Pod {
	p.Spec.HostNetwork = true
	return p
}

func withIP(p *corev1.Pod, n string) *corev1.Pod {
	q := resource.MustParse(n)
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{names.UnderlayIPResource: q},
		Limits:   corev1.ResourceList{names.UnderlayIPResource: q},
	}
	return p
}
