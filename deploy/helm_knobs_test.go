package deploy

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestHelmPodDisruptionBudgetKnobs: each component's podDisruptionBudget
// (the knobs of KEDA's and metrics-server's charts) sets minAvailable or
// maxUnavailable, an int or a percentage, and unhealthyPodEvictionPolicy;
// enabled: false renders none; both bounds at once fail the render naming
// the component.
func TestHelmPodDisruptionBudgetKnobs(t *testing.T) {
	for _, c := range chartComponents {
		t.Run(c.values, func(t *testing.T) {
			for _, tc := range []struct {
				name, pdb, fail string
				none            bool
				min, max        *intstr.IntOrString
				policy          policyv1.UnhealthyPodEvictionPolicyType
			}{
				{name: "default", pdb: "{}", min: ptr(intstr.FromInt32(1))},
				{name: "maxUnavailable", pdb: "{maxUnavailable: 1, unhealthyPodEvictionPolicy: AlwaysAllow}",
					max: ptr(intstr.FromInt32(1)), policy: policyv1.AlwaysAllow},
				{name: "percentage", pdb: `{minAvailable: "50%"}`, min: ptr(intstr.FromString("50%"))},
				{name: "disabled", pdb: "{enabled: false}", none: true},
				{name: "both", pdb: "{minAvailable: 1, maxUnavailable: 1}", fail: c.deployment + ": podDisruptionBudget sets both minAvailable and maxUnavailable"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					r, err := helmTemplate(t, "-f", writeValues(t, fmt.Sprintf("%s: {podDisruptionBudget: %s}\n", c.values, tc.pdb)))
					if tc.fail != "" {
						if err == nil || !strings.Contains(err.Error(), tc.fail) {
							t.Fatalf("want a failure saying %q, got %v", tc.fail, err)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					key := objectKey("PodDisruptionBudget", "capscale-system", c.deployment)
					if tc.none {
						if _, ok := r[key]; ok {
							t.Fatalf("%s is rendered", key)
						}
						return
					}
					spec := get[*policyv1.PodDisruptionBudget](t, r, key).Spec
					if !sameIntOrString(spec.MinAvailable, tc.min) || !sameIntOrString(spec.MaxUnavailable, tc.max) {
						t.Errorf("minAvailable %v, maxUnavailable %v; want %v and %v", spec.MinAvailable, spec.MaxUnavailable, tc.min, tc.max)
					}
					var policy policyv1.UnhealthyPodEvictionPolicyType
					if spec.UnhealthyPodEvictionPolicy != nil {
						policy = *spec.UnhealthyPodEvictionPolicy
					}
					if policy != tc.policy {
						t.Errorf("unhealthyPodEvictionPolicy %q, want %q", policy, tc.policy)
					}
				})
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func sameIntOrString(a, b *intstr.IntOrString) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// TestHelmDeploymentKnobs: image.digest pins every capscale container by
// digest over the tag (kube-scheduler's by its own image.digest);
// revisionHistoryLimit and updateStrategy reach each component's Deployment
// and are absent by default (Kubernetes' defaults, and the kustomize
// manifests stay equal to the chart).
func TestHelmDeploymentKnobs(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	def, err := helmTemplate(t, "--set", "extender.mode=extender")
	if err != nil {
		t.Fatal(err)
	}
	var values strings.Builder
	fmt.Fprintf(&values, "image: {tag: v9.9.9, digest: %q}\n", digest)
	for i, c := range chartComponents {
		extra := ""
		if c.values == "extender" {
			extra = fmt.Sprintf(", mode: extender, kubeScheduler: {image: {repository: registry.k8s.io/kube-scheduler, digest: %q}}", digest)
		}
		fmt.Fprintf(&values, "%s: {revisionHistoryLimit: %d, updateStrategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 0, maxUnavailable: 1}}%s}\n", c.values, i, extra)
	}
	set, err := helmTemplate(t, "-f", writeValues(t, values.String()))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range chartComponents {
		d := deployment(t, def, c.deployment)
		if d.Spec.RevisionHistoryLimit != nil || d.Spec.Strategy.Type != "" {
			t.Errorf("%s: by default revisionHistoryLimit %v, strategy %+v; want neither", c.deployment, d.Spec.RevisionHistoryLimit, d.Spec.Strategy)
		}
		d = deployment(t, set, c.deployment)
		if d.Spec.RevisionHistoryLimit == nil || *d.Spec.RevisionHistoryLimit != int32(i) {
			t.Errorf("%s: revisionHistoryLimit %v, want %d", c.deployment, d.Spec.RevisionHistoryLimit, i)
		}
		if s := d.Spec.Strategy; s.Type != "RollingUpdate" || s.RollingUpdate == nil || s.RollingUpdate.MaxSurge.IntValue() != 0 || s.RollingUpdate.MaxUnavailable.IntValue() != 1 {
			t.Errorf("%s: strategy %+v", c.deployment, s)
		}
		for _, ctr := range d.Spec.Template.Spec.Containers {
			want := "ghcr.io/capscale/capscale@" + digest
			if ctr.Name == "kube-scheduler" {
				want = "registry.k8s.io/kube-scheduler@" + digest
			}
			if ctr.Image != want {
				t.Errorf("%s/%s: image %q, want %q", c.deployment, ctr.Name, ctr.Image, want)
			}
		}
	}
}

// TestHelmSchedulerSwitches: scheduler.enabled turns capscale-scheduler off
// in every mode; extender.enabled=false still does in extender and native
// mode (its sidecar), but no longer in plugin mode, which runs no extender.
// extender.replicas sizes it; the deprecated extender.schedulerReplicas wins
// while set.
func TestHelmSchedulerSwitches(t *testing.T) {
	key := objectKey("Deployment", "capscale-system", "capscale-scheduler")
	for _, tc := range []struct {
		name     string
		args     []string
		replicas int32 // 0: no scheduler
	}{
		{name: "default", replicas: 2},
		{name: "replicas", args: []string{"--set", "extender.replicas=3"}, replicas: 3},
		{name: "deprecated schedulerReplicas wins", args: []string{"--set", "extender.replicas=3", "--set", "extender.schedulerReplicas=4"}, replicas: 4},
		{name: "plugin mode, extender.enabled=false", args: []string{"--set", "extender.enabled=false"}, replicas: 2},
		{name: "plugin mode, scheduler.enabled=false", args: []string{"--set", "scheduler.enabled=false"}},
		{name: "extender mode, extender.enabled=false", args: []string{"--set", "extender.mode=extender", "--set", "extender.enabled=false"}},
		{name: "native mode, extender.enabled=false", args: []string{"--set", "extender.mode=native", "--set", "extender.enabled=false"}},
		{name: "extender mode, scheduler.enabled=false", args: []string{"--set", "extender.mode=extender", "--set", "scheduler.enabled=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplate(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if tc.replicas == 0 {
				for _, k := range r.keys() {
					if strings.Contains(k, "capscale-scheduler") || strings.Contains(k, "capscale:extender") || strings.Contains(k, "capscale:scheduler") {
						t.Errorf("no scheduler asked for, yet %s is rendered", k)
					}
				}
				return
			}
			d := get[*appsv1.Deployment](t, r, key)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas {
				t.Errorf("replicas %v, want %d", d.Spec.Replicas, tc.replicas)
			}
		})
	}
}
