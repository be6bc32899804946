package workload

import (
	"net/http"

	"github.com/capscale/capscale/workload/lifecycle"
)

// target is the object a /v1 request is about, parsed from its path once.
// Its Kind is nil for an elastic web.
type target struct{ lifecycle.Target }

// resource is the URL name of the target's kind.
func (t target) resource() string {
	if t.Kind == nil {
		return "elasticwebs"
	}
	return t.Kind.Resource()
}

// parseTarget reads the target from the path, with an error for a resource
// the route does not serve. allowed nil means an elastic web route.
func parseTarget(r *http.Request, allowed []lifecycle.Kind) (target, error) {
	t := target{lifecycle.Target{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}}
	if allowed != nil {
		k, err := lifecycle.Lookup(r.PathValue("resource"), allowed)
		if err != nil {
			return target{}, err
		}
		t.Kind = k
	}
	return t, nil
}
