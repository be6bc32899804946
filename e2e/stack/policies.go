package stack

import (
	"context"
	"fmt"
)

// DefaultPolicies are deploy/'s files of the admission policies the chart
// installs by default (deploy/'s TestLocalUpAppliesTheChartsPolicies keeps
// the two lists equal): the MutatingAdmissionPolicies that mark the pods of
// namespaces labelled capscale.io/underlay=true, and the
// ValidatingAdmissionPolicy that holds capscale-controller's Node writes.
var DefaultPolicies = []string{"admission/underlay-ip.yaml", "admission/scheduler-name.yaml", "controller/node-writes.yaml"}

// ApplyDefaultPolicies applies DefaultPolicies, as `make local-up` does, so
// that the local plane admits pods as an installed cluster would.
func (s *Stack) ApplyDefaultPolicies(ctx context.Context) error {
	for _, f := range DefaultPolicies {
		if out, err := s.Kubectl(ctx, "apply", "-f", DeployFile(f)); err != nil {
			return fmt.Errorf("applying %s: %w\n%s", f, err, out)
		}
	}
	return nil
}
