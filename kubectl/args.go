package kubectl

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/capscale/capscale/workload/lifecycle"
)

// shortNames are kubectl's short and singular names of the kinds served.
var shortNames = map[string]string{
	"deploy": "deployments", "deployment": "deployments",
	"sts": "statefulsets", "statefulset": "statefulsets",
	"ds": "daemonsets", "daemonset": "daemonsets",
}

// shortNamesOf returns kubectl's short names of kinds (deploy, sts, ds), in
// their order: what a verb's help offers is what it accepts.
func shortNamesOf(kinds []lifecycle.Kind) []string {
	var out []string
	for _, k := range kinds {
		for short, full := range shortNames {
			if full == k.Resource() && short != strings.TrimSuffix(full, "s") {
				out = append(out, short)
			}
		}
	}
	return out
}

// parseWorkload reads TYPE/NAME or TYPE NAME, as kubectl does, into a
// target in namespace ns; TYPE may carry the group (deployments.apps).
func parseWorkload(args []string, allowed []lifecycle.Kind, ns string) (lifecycle.Target, error) {
	var typ, name string
	switch {
	case len(args) == 1 && strings.Contains(args[0], "/"):
		typ, name, _ = strings.Cut(args[0], "/")
	case len(args) == 2 && !strings.Contains(args[0], "/"):
		typ, name = args[0], args[1]
	default:
		return lifecycle.Target{}, fmt.Errorf("name the workload as TYPE/NAME or TYPE NAME (e.g. deployment/web), got %q", strings.Join(args, " "))
	}
	if name == "" || strings.Contains(name, "/") {
		return lifecycle.Target{}, fmt.Errorf("%q is not a workload name", name)
	}
	typ = strings.ToLower(strings.TrimSuffix(typ, ".apps"))
	if full, ok := shortNames[typ]; ok {
		typ = full
	}
	k, err := lifecycle.Lookup(typ, allowed)
	if err != nil {
		return lifecycle.Target{}, err
	}
	return lifecycle.Target{Namespace: ns, Name: name, Kind: k}, nil
}

// roles names the ClusterRoles of deploy/ that grant what each command
// needs, for the hint on a refusal by the apiserver.
var roles = map[string]string{
	"ips":     "capscale-kubectl:ips",
	"check":   "capscale-kubectl:check in the namespace",
	"stop":    "capscale-workload:stop-start",
	"start":   "capscale-workload:stop-start",
	"restart": "capscale-workload:restart",
	"scale":   "capscale-workload:scale",
	"max":     "capscale-workload:scale and capscale-workload:view in the namespace, capscale-kubectl:ips cluster-wide",
}

// explain turns an error into what the user reads: a refusal with the
// flag that overcomes it, an apiserver Forbidden (which names the verb and
// resource the user lacks) with the ClusterRole that grants the command's
// rights.
func explain(err error, command string, adjustHPA bool) error {
	var refusal *lifecycle.Refusal
	var invalid *lifecycle.Invalid
	switch {
	case errors.As(err, &refusal):
		switch refusal.Remedy {
		case lifecycle.RemedyReplicas:
			return fmt.Errorf("%s; start with --replicas N", refusal.Reason)
		case lifecycle.RemedyAdjustHPA:
			return fmt.Errorf("%s; add --adjust-hpa to move the HPA's bounds to include it", refusal.Reason)
		}
		return errors.New(refusal.Reason)
	case errors.As(err, &invalid):
		if invalid.Field == "replicas" {
			return fmt.Errorf("--replicas: %s", invalid.Reason)
		}
		return invalid
	case apierrors.IsForbidden(err):
		role := roles[command]
		if adjustHPA {
			role += " and capscale-workload:scale-adjust-hpa"
		}
		return fmt.Errorf("%w\n(%s needs the rights of ClusterRole %s; see docs/kubectl.md)", err, command, role)
	}
	return err
}
