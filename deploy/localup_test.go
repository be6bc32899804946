package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/capscale/capscale/e2e/stack"
)

// TestLocalUpAppliesTheChartsPolicies: `make local-up` applies
// stack.DefaultPolicies; they are exactly the admission policies (and
// bindings) the chart installs by default, so that a namespace labelled
// capscale.io/underlay=true on the local plane is marked as on an installed
// cluster.
func TestLocalUpAppliesTheChartsPolicies(t *testing.T) {
	r, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	var chart []string
	for _, k := range r.keys() {
		if strings.Contains(k, "AdmissionPolicy") {
			chart = append(chart, k)
		}
	}
	var local []string
	for _, f := range stack.DefaultPolicies {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		local = append(local, decodeRender(t, string(b)).keys()...)
	}
	slices.Sort(local)
	if len(chart) == 0 || !slices.Equal(chart, local) {
		t.Errorf("the chart installs by default\n%v\nlocal-up applies\n%v", chart, local)
	}
}
