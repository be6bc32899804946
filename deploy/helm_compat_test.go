package deploy

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestHelmSchedulerPerMinor: in plugin mode the chart runs the
// capscale-scheduler built for the cluster's minor (make release puts
// /capscale-scheduler-1.MINOR beside /capscale-scheduler, v1.37's, in the
// image); a minor it was not built for gets v1.37's.
func TestHelmSchedulerPerMinor(t *testing.T) {
	for _, tc := range []struct{ kube, want string }{
		{"1.35.8", "/capscale-scheduler-1.35"},
		{"1.36.5", "/capscale-scheduler-1.36"},
		{"1.37.2", "/capscale-scheduler"},
		{"1.38.0", "/capscale-scheduler"},
	} {
		t.Run(tc.kube, func(t *testing.T) {
			r, err := helmTemplate(t, "--set", "extender.mode=plugin", "--kube-version", tc.kube)
			if err != nil {
				t.Fatal(err)
			}
			d := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
			if c := container(t, d, "kube-scheduler"); len(c.Command) == 0 || c.Command[0] != tc.want || !slices.Contains(c.Command, "--config=/etc/capscale/config.yaml") {
				t.Errorf("command %v, want %s first", c.Command, tc.want)
			}
		})
	}
}
