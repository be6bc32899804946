package workload

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/names"
)

// ElasticWeb is the answer of PUT and GET .../elasticwebs/{name}: the
// ElasticWeb's spec and status as the apiserver holds them. Status is
// capscale-controller's; it describes the spec when observedGeneration
// equals Generation.
type ElasticWeb struct {
	Namespace  string                    `json:"namespace"`
	Name       string                    `json:"name"`
	Generation int64                     `json:"generation"`
	Spec       v1alpha1.ElasticWebSpec   `json:"spec"`
	Status     v1alpha1.ElasticWebStatus `json:"status"`
}

// elasticWebApply is the server-side apply body of PUT: the ElasticWeb's
// identity and the caller's spec as sent, so that the apiserver (its schema
// and CEL rules) is the one judge of the spec and names each bad field.
func elasticWebApply(ns, name string, spec map[string]json.RawMessage) ([]byte, error) {
	return json.Marshal(map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(),
		"kind":       v1alpha1.ElasticWebKind,
		"metadata":   map[string]string{"name": name, "namespace": ns},
		"spec":       spec,
	})
}

// applyElasticWeb server-side applies the body as the ElasticWeb's spec, as
// the caller, with field manager capscale-workload-api. Fields of the spec
// the API set before and the body leaves out are removed (PUT). A field
// another manager owns is a 409 naming it unless ?force=true.
func (s *Server) applyElasticWeb(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), targetOf(r)
	dc := callerDynamic(r)
	if dc == nil {
		httpserver.WriteError(w, http.StatusInternalServerError, "the elastic web routes are not configured")
		return
	}
	force := false
	if v := r.URL.Query().Get("force"); v != "" {
		var err error
		if force, err = strconv.ParseBool(v); err != nil {
			httpserver.WriteError(w, http.StatusBadRequest, fmt.Sprintf("query parameter force=%q is not a boolean", v))
			return
		}
	}
	var spec map[string]json.RawMessage
	if !decodeBody(w, r, &spec, false) {
		return
	}
	if spec == nil {
		httpserver.WriteError(w, http.StatusBadRequest, "the body must be a JSON object: the ElasticWeb's spec")
		return
	}
	body, err := elasticWebApply(p.namespace, p.name, spec)
	if err != nil {
		httpserver.WriteError(w, http.StatusBadRequest, fmt.Sprintf("encoding the ElasticWeb: %v", err))
		return
	}
	u, err := dc.Resource(v1alpha1.ElasticWebResource).Namespace(p.namespace).Patch(ctx, p.name, types.ApplyPatchType, body, metav1.PatchOptions{
		FieldManager: names.WorkloadAPIFieldManager,
		Force:        &force,
		// Unknown fields are errors naming them, never silently dropped.
		FieldValidation: metav1.FieldValidationStrict,
	})
	if err != nil {
		what := fmt.Sprintf("applying ElasticWeb %s/%s", p.namespace, p.name)
		if apierrors.IsNotFound(err) {
			// An apply creates what is missing: only the resource can be.
			what += " (is the ElasticWeb CRD installed? kubectl apply --server-side -f deploy/crd/)"
		}
		writeError(w, r, what, err)
		return
	}
	writeElasticWeb(w, r, u)
}

// getElasticWeb reads the ElasticWeb as the caller.
func (s *Server) getElasticWeb(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), targetOf(r)
	dc := callerDynamic(r)
	if dc == nil {
		httpserver.WriteError(w, http.StatusInternalServerError, "the elastic web routes are not configured")
		return
	}
	u, err := dc.Resource(v1alpha1.ElasticWebResource).Namespace(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
	if err != nil {
		writeError(w, r, fmt.Sprintf("reading ElasticWeb %s/%s", p.namespace, p.name), err)
		return
	}
	writeElasticWeb(w, r, u)
}

func writeElasticWeb(w http.ResponseWriter, r *http.Request, u *unstructured.Unstructured) {
	var ew v1alpha1.ElasticWeb
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &ew); err != nil {
		writeError(w, r, fmt.Sprintf("decoding ElasticWeb %s/%s", u.GetNamespace(), u.GetName()), err)
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, ElasticWeb{
		Namespace: ew.Namespace, Name: ew.Name, Generation: ew.Generation,
		Spec: ew.Spec, Status: ew.Status,
	})
}
