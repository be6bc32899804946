package deploy

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestHelmPodValues: imagePullSecrets and priorityClassName reach every
// capscale pod, logVerbosity every container (kube-scheduler's too); by
// default none has a pull secret or --v, and the scheduler and the metrics
// adapter run at system-cluster-critical (metrics-server's chart's default:
// HPAs wait on the adapter as pods wait on the scheduler). A component's
// priorityClassName wins over the global one, which reaches the components
// that set none.
func TestHelmPodValues(t *testing.T) {
	const critical = "system-cluster-critical"
	deployments := []string{"capscale-scheduler", "capscale-metrics-adapter", "capscale-workload-api", "capscale-controller"}
	for _, tc := range []struct {
		name, values string
		secret       string
		// priority is each Deployment's class, by name.
		priority  map[string]string
		verbosity string
	}{
		{name: "defaults", priority: map[string]string{"capscale-scheduler": critical, "capscale-metrics-adapter": critical}},
		{name: "global", values: "imagePullSecrets: [{name: regcred}]\npriorityClassName: capscale-high\nlogVerbosity: 4\n",
			secret: "regcred", verbosity: "--v=4", priority: map[string]string{
				"capscale-scheduler": critical, "capscale-metrics-adapter": critical,
				"capscale-workload-api": "capscale-high", "capscale-controller": "capscale-high"}},
		{name: "per component", values: "priorityClassName: capscale-high\nextender: {priorityClassName: sched}\n" +
			"metricsAdapter: {priorityClassName: \"\"}\ncontroller: {priorityClassName: ctl}\n",
			priority: map[string]string{
				"capscale-scheduler": "sched", "capscale-metrics-adapter": "capscale-high",
				"capscale-workload-api": "capscale-high", "capscale-controller": "ctl"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplate(t, "-f", writeValues(t, tc.values))
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range deployments {
				spec := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", name)).Spec.Template.Spec
				want := tc.priority[name]
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
