package workload

import (
	"context"
	"net/http"

	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/httpserver"
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

type targetKey struct{}

// withTarget parses the path once for everything after it — the audit line,
// the logger, the access checks and the handler — and answers 404 for a
// resource the route does not serve. allowed nil means an elastic web route.
func withTarget(allowed []kind, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := target{namespace: r.PathValue("namespace"), name: r.PathValue("name")}
		if allowed != nil {
			k, err := lookupKind(r.PathValue("resource"), allowed)
			if err != nil {
				httpserver.WriteError(w, http.StatusNotFound, err.Error())
				return
			}
			t.kind = k
		}
		ctx := context.WithValue(r.Context(), targetKey{}, t)
		// A contextual logger that names the object, so that log lines need
		// not repeat it.
		ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues(
			"resource", t.resource(), "namespace", t.namespace, "name", t.name))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// targetOf returns the request's target; withTarget set it.
func targetOf(r *http.Request) target {
	t, _ := r.Context().Value(targetKey{}).(target)
	return t
}
