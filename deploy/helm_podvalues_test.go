package deploy

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestHelmPodValues: imagePullSecrets and priorityClassName reach every
// capscale pod, logVerbosity every container (kube-scheduler's too); by
// default none has a pull secret or --v, and only the scheduler has a class
// (system-cluster-critical), which priorityClassName replaces.
func TestHelmPodValues(t *testing.T) {
	deployments := []string{"capscale-scheduler", "capscale-metrics-adapter", "capscale-workload-api", "capscale-controller"}
	for _, tc := range []struct {
		name, values     string
		secret, priority string
		schedPriority    string
		verbosity        string
	}{
		{name: "defaults", schedPriority: "system-cluster-critical"},
		{name: "set", values: "imagePullSecrets: [{name: regcred}]\npriorityClassName: capscale-high\nlogVerbosity: 4\n",
			secret: "regcred", priority: "capscale-high", schedPriority: "capscale-high", verbosity: "--v=4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplate(t, "-f", writeValues(t, tc.values))
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range deployments {
				spec := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", name)).Spec.Template.Spec
				want := tc.priority
				if name == "capscale-scheduler" {
					want = tc.schedPriority
				}
				var secret string
				if len(spec.ImagePullSecrets) == 1 {
					secret = spec.ImagePullSecrets[0].Name
				}
				if spec.PriorityClassName != want || secret != tc.secret || len(spec.ImagePullSecrets) > 1 {
					t.Errorf("%s: priorityClassName %q, imagePullSecrets %v; want %q and [%s]", name, spec.PriorityClassName, spec.ImagePullSecrets, want, tc.secret)
				}
				for _, c := range spec.Containers {
					var v []string
					for _, a := range c.Command {
						if strings.HasPrefix(a, "--v=") {
							v = append(v, a)
						}
					}
					if tc.verbosity == "" && len(v) > 0 || tc.verbosity != "" && (len(v) != 1 || v[0] != tc.verbosity) {
						t.Errorf("%s/%s: verbosity flags %v, want %q", name, c.Name, v, tc.verbosity)
					}
				}
			}
		})
	}
}
