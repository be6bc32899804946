package deploy

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestAdmissionPolicies: the chart renders deploy/admission's policies
// (TestHelmRendersKustomize compares them field by field), each can be
// turned off alone, and both select pods by capscale's namespace label and
// add capscale's resource. The policies' behaviour on kube-apiserver is
// e2e's TestUnderlayPodPolicy.
func TestAdmissionPolicies(t *testing.T) {
	ipPolicy := objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-ip")
	ipBinding := objectKey("MutatingAdmissionPolicyBinding", "", "capscale-underlay-ip")
	schedPolicy := objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-scheduler")
	schedBinding := objectKey("MutatingAdmissionPolicyBinding", "", "capscale-underlay-scheduler")
	for _, tc := range []struct {
		name string
		set  []string
		want map[string]bool
	}{
		{name: "defaults", want: map[string]bool{ipPolicy: true, ipBinding: true, schedPolicy: true, schedBinding: true}},
		{name: "no schedulerName: capscale extends the default scheduler", set: []string{"--set", "admissionPolicies.schedulerName=false"},
			want: map[string]bool{ipPolicy: true, ipBinding: true}},
		{name: "neither", set: []string{"--set", "admissionPolicies.schedulerName=false", "--set", "admissionPolicies.underlayIP=false"},
			want: map[string]bool{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplate(t, tc.set...)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{ipPolicy, ipBinding, schedPolicy, schedBinding} {
				if _, ok := r[k]; ok != tc.want[k] {
					t.Errorf("%s rendered: %v, want %v", k, ok, tc.want[k])
				}
			}
		})
	}
	r := kustomize(t, "deploy")
	for _, k := range []string{ipPolicy, schedPolicy} {
		p := get[*admissionv1.MutatingAdmissionPolicy](t, r, k)
		mc := p.Spec.MatchConstraints
		if mc == nil || mc.NamespaceSelector == nil || mc.NamespaceSelector.MatchLabels[names.UnderlayNamespaceLabel] != "true" {
			t.Errorf("%s: namespaceSelector %+v, want %s=true", k, mc, names.UnderlayNamespaceLabel)
		}
		if len(mc.ResourceRules) != 1 || mc.ResourceRules[0].Resources[0] != "pods" || mc.ResourceRules[0].Operations[0] != admissionv1.Create {
			t.Errorf("%s: resource rules %+v, want pods on CREATE", k, mc.ResourceRules)
		}
		if *p.Spec.FailurePolicy != admissionv1.Fail {
			t.Errorf("%s: failurePolicy %s, want Fail: an error must not let a pod through uncounted", k, *p.Spec.FailurePolicy)
		}
		b := get[*admissionv1.MutatingAdmissionPolicyBinding](t, r, objectKey("MutatingAdmissionPolicyBinding", "", p.Name))
		if b.Spec.PolicyName != p.Name {
			t.Errorf("binding %s binds %q", b.Name, b.Spec.PolicyName)
		}
	}
	if p := get[*admissionv1.MutatingAdmissionPolicy](t, r, ipPolicy); !strings.Contains(p.Spec.Mutations[0].ApplyConfiguration.Expression, string(underlay.Resource)) {
		t.Errorf("%s does not add %s", ipPolicy, underlay.Resource)
	}
}
