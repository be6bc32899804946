package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"

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

// specShapeError names a field of spec that is not a field of the ElasticWeb
// spec or holds a JSON value of the wrong type. The apiserver answers such an
// apply with a 500 (kubernetes/kubernetes#139253), so the API checks the
// shape against the Go type itself; the values (ranges, required fields, CEL
// rules) stay the apiserver's to judge.
func specShapeError(spec map[string]json.RawMessage) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var typed v1alpha1.ElasticWebSpec
	err = dec.Decode(&typed)
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te) && te.Field != "":
		return fmt.Errorf("spec.%s: Invalid value: a JSON %s: must be %s", te.Field, te.Value, jsonKind(te.Type.Kind()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		if _, top := spec[name]; top {
			return fmt.Errorf("spec.%s: Unsupported field: the spec's fields are image, port, singlePodQPS, totalQPS, minReplicas, maxReplicas and resources", name)
		}
		return fmt.Errorf("spec: unknown field %q", name)
	default:
		return fmt.Errorf("spec: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
}

func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return k.String()
}

// applyElasticWeb server-side applies the body as the ElasticWeb's spec, as
// the caller, with field manager capscale-workload-api. Fields of the spec
// the API set before and the body leaves out are removed (PUT). A field
// another manager owns is a 409 naming it unless ?force=true.
func (s *Server) applyElasticWeb(w http.ResponseWriter, r *http.Request, p target, c caller) {
	ctx, dc := r.Context(), c.dynamic
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
	if err := specShapeError(spec); err != nil {
		httpserver.WriteError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	body, err := elasticWebApply(p.Namespace, p.Name, spec)
	if err != nil {
		httpserver.WriteError(w, http.StatusBadRequest, fmt.Sprintf("encoding the ElasticWeb: %v", err))
		return
	}
	u, err := dc.Resource(v1alpha1.ElasticWebResource).Namespace(p.Namespace).Patch(ctx, p.Name, types.ApplyPatchType, body, metav1.PatchOptions{
		FieldManager: names.WorkloadAPIFieldManager,
		Force:        &force,
		// Unknown fields are errors naming them, never silently dropped.
		FieldValidation: metav1.FieldValidationStrict,
	})
	if err != nil {
		what := fmt.Sprintf("applying ElasticWeb %s/%s", p.Namespace, p.Name)
		if apierrors.IsNotFound(err) {
			// An apply creates what is missing: only the resource can be.
			what += " (is the ElasticWeb CRD installed? kubectl apply --server-side -f deploy/crd/)"
		}
		writeError(w, r, fmt.Errorf("%s: %w", what, err))
		return
	}
	writeElasticWeb(w, r, u)
}

// getElasticWeb reads the ElasticWeb as the caller.
func (s *Server) getElasticWeb(w http.ResponseWriter, r *http.Request, p target, c caller) {
	ctx, dc := r.Context(), c.dynamic
	if dc == nil {
		httpserver.WriteError(w, http.StatusInternalServerError, "the elastic web routes are not configured")
		return
	}
	u, err := dc.Resource(v1alpha1.ElasticWebResource).Namespace(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		writeError(w, r, fmt.Errorf("reading ElasticWeb %s/%s: %w", p.Namespace, p.Name, err))
		return
	}
	writeElasticWeb(w, r, u)
}

func writeElasticWeb(w http.ResponseWriter, r *http.Request, u *unstructured.Unstructured) {
	var ew v1alpha1.ElasticWeb
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &ew); err != nil {
		writeError(w, r, fmt.Errorf("decoding ElasticWeb %s/%s: %w", u.GetNamespace(), u.GetName(), err))
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, ElasticWeb{
		Namespace: ew.Namespace, Name: ew.Name, Generation: ew.Generation,
		Spec: ew.Spec, Status: ew.Status,
	})
}
