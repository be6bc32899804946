package workload

import (
	"net/http"
)

// target is the object a /v1 request is about, parsed from its path once.
type target struct {
	namespace, name string
	// kind is nil for an elastic web.
	kind kind
}

// resource is the URL name of the target's kind.
func (t target) resource() string {
	if t.kind == nil {
		return "elasticwebs"
	}
	return t.kind.resource()
}

// parseTarget reads the target from the path, with an error for a resource
// the route does not serve. allowed nil means an elastic web route.
func parseTarget(r *http.Request, allowed []kind) (target, error) {
	t := target{namespace: r.PathValue("namespace"), name: r.PathValue("name")}
	if allowed != nil {
		k, err := lookupKind(r.PathValue("resource"), allowed)
		if err != nil {
			return target{}, err
		}
		t.kind = k
	}
	return t, nil
}
