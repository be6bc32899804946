package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/workload/auth"
)

// kind is a workload resource the API serves.
type kind struct {
	resource string // URL and RBAC name, e.g. "deployments"
	kind     string // Kind, as in an HPA's scaleTargetRef
}

var (
	deploymentKind  = kind{"deployments", "Deployment"}
	statefulSetKind = kind{"statefulsets", "StatefulSet"}
	daemonSetKind   = kind{"daemonsets", "DaemonSet"}

	restartable = []kind{deploymentKind, statefulSetKind, daemonSetKind}
	scalable    = []kind{deploymentKind, statefulSetKind}
)

func lookupKind(resource string, allowed []kind) (kind, error) {
	for _, k := range allowed {
		if k.resource == resource {
			return k, nil
		}
	}
	names := make([]string, len(allowed))
	for i, k := range allowed {
		names[i] = k.resource
	}
	return kind{}, fmt.Errorf("resource %q is not served here; use one of %s", resource, strings.Join(names, ", "))
}

// workloadAttrs checks verb on the URL's resource (in group apps), with an
// optional subresource, for the named object.
func (s *Server) workloadAttrs(verb, subresource string, allowed []kind) attrsFunc {
	return func(r *http.Request) ([]auth.Attributes, error) {
		p := pathOf(r)
		k, err := lookupKind(p.resource, allowed)
		if err != nil {
			return nil, err
		}
		return []auth.Attributes{{
			Verb: verb, Group: "apps", Resource: k.resource, Subresource: subresource,
			Namespace: p.namespace, Name: p.name,
		}}, nil
	}
}

// elasticWebAttrs checks every verb on each object an elastic web consists
// of: the caller must be allowed to do by hand what the API does for them.
func elasticWebAttrs(verbs ...string) attrsFunc {
	objs := []struct{ group, resource string }{
		{"apps", "deployments"}, {"", "services"}, {"autoscaling", "horizontalpodautoscalers"},
	}
	return func(r *http.Request) ([]auth.Attributes, error) {
		p := pathOf(r)
		var out []auth.Attributes
		for _, o := range objs {
			for _, v := range verbs {
				out = append(out, auth.Attributes{Verb: v, Group: o.group, Resource: o.resource, Namespace: p.namespace, Name: p.name})
			}
		}
		return out, nil
	}
}

// errBodyTooLarge is returned by decodeJSON for an oversized body.
var errBodyTooLarge = errors.New("request body too large")

// errEmptyBody is returned by decodeJSON for a body with no JSON value.
var errEmptyBody = errors.New("request body is required")

// decodeJSON decodes exactly one JSON value from body into v, refusing
// unknown fields and trailing data. A body that is empty or only whitespace
// is errEmptyBody.
func decodeJSON(body io.Reader, v any) error {
	// Peek for emptiness without losing data.
	var buf bytes.Buffer
	dec := json.NewDecoder(io.TeeReader(body, &buf))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return errBodyTooLarge
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(buf.Bytes())) == 0:
			return errEmptyBody
		}
		return fmt.Errorf("decoding request body: %w", err)
	}
	// Anything but whitespace after the value is an error, be it a second
	// value or garbage.
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errBodyTooLarge
		}
		return fmt.Errorf("decoding request body: data after the JSON value: %w", err)
	default:
		return errors.New("decoding request body: it must hold a single JSON value")
	}
}

// decodeBody decodes the request body into v and writes the error response
// itself when it fails. optional allows an empty body.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			httpserver.WriteError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q is not supported; send application/json", ct))
			return false
		}
	}
	err := decodeJSON(r.Body, v)
	switch {
	case err == nil:
		return true
	case errors.Is(err, errEmptyBody) && optional:
		return true
	case errors.Is(err, errBodyTooLarge):
		httpserver.WriteError(w, http.StatusRequestEntityTooLarge, "request body too large")
	default:
		httpserver.WriteError(w, http.StatusBadRequest, err.Error())
	}
	return false
}

// path is a request's object coordinates.
type path struct{ namespace, resource, name string }

func pathOf(r *http.Request) path {
	return path{namespace: r.PathValue("namespace"), resource: r.PathValue("resource"), name: r.PathValue("name")}
}

// writeAPIError answers for a failed API server call made while doing what.
// The caller passed authorization, so a Forbidden here is capscale's own
// service account lacking RBAC: that is a server-side problem, not the
// caller's.
func writeAPIError(w http.ResponseWriter, r *http.Request, what string, err error) {
	msg := fmt.Sprintf("%s: %v", what, err)
	code := http.StatusInternalServerError
	switch {
	case apierrors.IsNotFound(err):
		code = http.StatusNotFound
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		code = http.StatusConflict
	case apierrors.IsInvalid(err):
		code = http.StatusUnprocessableEntity
	case apierrors.IsBadRequest(err):
		code = http.StatusBadRequest
	case apierrors.IsForbidden(err):
		msg = fmt.Sprintf("%s: the workload API's service account was refused (check its RBAC): %v", what, err)
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err):
		code = http.StatusServiceUnavailable
	}
	if code >= 500 {
		klog.FromContext(r.Context()).Error(err, "API call failed", "what", what)
	}
	httpserver.WriteError(w, code, msg)
}
