package deploy

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/capscale/capscale/internal/names"
)

// TestKubectlCheckRole: capscale-kubectl:check lets its user read every
// external metric capscale serves, and nothing more of that API; it joins
// the edit and admin roles only with kubectlRoles.aggregateToEdit.
// (TestHelmRendersKustomize keeps the chart's and deploy/'s the same.)
func TestKubectlCheckRole(t *testing.T) {
	key := objectKey("ClusterRole", "", "capscale-kubectl:check")
	for _, tc := range []struct {
		name, values string
		aggregated   bool
	}{
		{name: "default"},
		{name: "aggregated", values: "kubectlRoles: {aggregateToEdit: true}\n", aggregated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			if tc.values != "" {
				args = []string{"-f", writeValues(t, tc.values)}
			}
			r, err := helmTemplate(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			cr := get[*rbacv1.ClusterRole](t, r, key)
			for _, l := range []string{"rbac.authorization.k8s.io/aggregate-to-edit", "rbac.authorization.k8s.io/aggregate-to-admin"} {
				if got := cr.Labels[l] == "true"; got != tc.aggregated {
					t.Errorf("label %s: %t, want %t", l, got, tc.aggregated)
				}
			}
			if tc.name != "default" {
				return
			}
			want := []string{names.DesiredReplicasMetric, names.LoadIndexMetric, names.RealQPSMetric, names.TotalQPSMetric}
			found := false
			for _, rule := range cr.Rules {
				if !slices.Contains(rule.APIGroups, "external.metrics.k8s.io") {
					continue
				}
				found = true
				got := slices.Sorted(slices.Values(rule.Resources))
				if !slices.Equal(got, want) || !slices.Equal(rule.Verbs, []string{"list"}) {
					t.Errorf("external metrics rule %v %v, want list on exactly %v", rule.Verbs, got, want)
				}
			}
			if !found {
				t.Error("no rule for external.metrics.k8s.io")
			}
		})
	}
}
