package workload

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/internal/names"
)

// TestElasticWebPutAndGet: PUT is one server-side apply of the ElasticWeb
// with the body as its spec, as the caller, by the API's own field manager;
// GET returns the spec and the controller's status from the resource.
func TestElasticWebPutAndGet(t *testing.T) {
	e := newEnv(t)
	body := `{"image":"nginx:1.27","port":8080,"singlePodQPS":0.1,"totalQPS":1.1,"maxReplicas":20}`
	var got ElasticWeb
	if code := e.do(http.MethodPut, "/v1/namespaces/ns/elasticwebs/shop", "alice", body, &got); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	if got.Namespace != "ns" || got.Name != "shop" || got.Generation != 1 || got.Spec.Image != "nginx:1.27" || got.Spec.Port != 8080 ||
		got.Spec.SinglePodQPS != 0.1 || got.Spec.TotalQPS != 1.1 || got.Spec.MaxReplicas == nil || *got.Spec.MaxReplicas != 20 {
		t.Errorf("PUT answered %+v", got)
	}
	if len(e.applies) != 1 {
		t.Fatalf("%d applies, want 1", len(e.applies))
	}
	a := e.applies[0]
	if o := a.PatchOptions; o.FieldManager != names.WorkloadAPIFieldManager || o.Force == nil || *o.Force || o.FieldValidation != metav1.FieldValidationStrict {
		t.Errorf("apply options %+v, want manager %s, no force, strict field validation", o, names.WorkloadAPIFieldManager)
	}
	// Spec only, exactly as sent: the apiserver judges it.
	var sent map[string]any
	if err := json.Unmarshal(a.Patch, &sent); err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal([]byte(body), &spec); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "capscale.io/v1alpha1", "kind": "ElasticWeb",
		"metadata": map[string]any{"name": "shop", "namespace": "ns"}, "spec": spec,
	}
	if !reflect.DeepEqual(sent, want) {
		t.Errorf("applied %s, want %v", a.Patch, want)
	}
	for _, c := range e.callLog() {
		if c.user != "alice" || c.Group != v1alpha1.GroupName || c.Resource != "elasticwebs" || c.Verb != "patch" {
			t.Errorf("PUT made %+v as %q; want only the apply of the ElasticWeb, as alice", c.ResourceAttributes, c.user)
		}
	}

	// The controller writes the status; GET reads it back.
	status := v1alpha1.ElasticWebStatus{
		ObservedGeneration: 1, QPSReplicas: 11, DesiredReplicas: 11, ReadyReplicas: 10, RealQPS: 1, NodePort: 30080,
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonScaling, Message: "10 of 11 replicas ready"}},
	}
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.ews["ns/shop"].Object["status"] = st
	e.mu.Unlock()
	got = ElasticWeb{}
	if code := e.do(http.MethodGet, "/v1/namespaces/ns/elasticwebs/shop", "alice", "", &got); code != http.StatusOK {
		t.Fatalf("GET: %d", code)
	}
	if got.Generation != 1 || got.Spec.TotalQPS != 1.1 || got.Status.QPSReplicas != 11 || got.Status.ReadyReplicas != 10 || got.Status.RealQPS != 1 ||
		got.Status.NodePort != 30080 || len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Message != "10 of 11 replicas ready" {
		t.Errorf("GET answered %+v", got)
	}

	// A second PUT that leaves maxReplicas out removes it (PUT, not
	// merge); force=true is passed on.
	got = ElasticWeb{}
	if code := e.do(http.MethodPut, "/v1/namespaces/ns/elasticwebs/shop?force=true", "alice", `{"image":"nginx:1.27","port":8080,"singlePodQPS":0.1,"totalQPS":1.8}`, &got); code != http.StatusOK {
		t.Fatalf("second PUT: %d", code)
	}
	if got.Generation != 2 || got.Spec.MaxReplicas != nil || got.Spec.TotalQPS != 1.8 || got.Status.ReadyReplicas != 10 {
		t.Errorf("second PUT answered %+v", got)
	}
	if o := e.applies[1].PatchOptions; o.Force == nil || !*o.Force {
		t.Errorf("force=true was not passed on: %+v", o)
	}
}

// TestElasticWebErrors: the apiserver's refusals reach the caller with their
// code and message (the fields they name included); the API's own refusals
// come before any call.
func TestElasticWebErrors(t *testing.T) {
	gk := schema.GroupKind{Group: v1alpha1.GroupName, Kind: v1alpha1.ElasticWebKind}
	invalid := apierrors.NewInvalid(gk, "shop", field.ErrorList{
		field.Invalid(field.NewPath("spec", "singlePodQPS"), 0, "singlePodQPS must be greater than 0"),
		field.Required(field.NewPath("spec", "port"), ""),
	})
	conflict := apierrors.NewApplyConflict([]metav1.StatusCause{{Type: metav1.CauseTypeFieldManagerConflict, Field: ".spec.totalQPS",
		Message: `conflict with "kubectl-patch" using capscale.io/v1alpha1`}}, `Apply failed with 1 conflict: conflict with "kubectl-patch" using capscale.io/v1alpha1: .spec.totalQPS`)
	noCRD := apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupName, Resource: "elasticwebs"}, "shop")
	const ok = `{"image":"nginx","port":80,"singlePodQPS":10,"totalQPS":30}`
	tests := []struct {
		name, method, path, user, body string
		// apiserver, when set, is the fake apiserver's answer to the call.
		apiserver error
		deny      bool
		wantCode  int
		wantMsg   []string
		wantCalls int
	}{
		{name: "the schema's refusal names each field", method: http.MethodPut, body: `{"image":"nginx","singlePodQPS":0,"totalQPS":10}`, apiserver: invalid,
			wantCode: http.StatusUnprocessableEntity, wantMsg: []string{"spec.singlePodQPS: Invalid value: 0: singlePodQPS must be greater than 0", "spec.port: Required value"}, wantCalls: 1},
		{name: "a field another manager owns", method: http.MethodPut, body: ok, apiserver: conflict,
			wantCode: http.StatusConflict, wantMsg: []string{`conflict with "kubectl-patch"`, ".spec.totalQPS"}, wantCalls: 1},
		{name: "RBAC refuses the caller", method: http.MethodPut, body: ok, deny: true,
			wantCode: http.StatusForbidden, wantMsg: []string{`User "alice" cannot patch resource "elasticwebs"`}, wantCalls: 1},
		{name: "no CRD", method: http.MethodPut, body: ok, apiserver: noCRD,
			wantCode: http.StatusNotFound, wantMsg: []string{"is the ElasticWeb CRD installed"}, wantCalls: 1},
		{name: "GET of a missing ElasticWeb", method: http.MethodGet, wantCode: http.StatusNotFound, wantMsg: []string{`"shop" not found`}, wantCalls: 1},
		{name: "GET refused", method: http.MethodGet, deny: true, wantCode: http.StatusForbidden, wantMsg: []string{"cannot get"}, wantCalls: 1},
		// The apiserver would answer these with a 500 (kubernetes#139253):
		// the API names the field itself and makes no call.
		{name: "a value of the wrong type", method: http.MethodPut, body: `{"image":"nginx","port":"http","singlePodQPS":1,"totalQPS":1}`,
			wantCode: http.StatusUnprocessableEntity, wantMsg: []string{"spec.port: Invalid value: a JSON string: must be an integer"}},
		{name: "a field the spec does not have", method: http.MethodPut, body: `{"image":"nginx","port":80,"singlePodQPS":1,"totalQPS":1,"replicas":3}`,
			wantCode: http.StatusUnprocessableEntity, wantMsg: []string{"spec.replicas: Unsupported field"}},
		{name: "an unknown nested field", method: http.MethodPut, body: `{"image":"nginx","port":80,"singlePodQPS":1,"totalQPS":1,"resources":{"request":{}}}`,
			wantCode: http.StatusUnprocessableEntity, wantMsg: []string{`spec: unknown field "request"`}},
		{name: "a quantity that is none", method: http.MethodPut, body: `{"image":"nginx","port":80,"singlePodQPS":1,"totalQPS":1,"resources":{"limits":{"cpu":"lots"}}}`,
			wantCode: http.StatusUnprocessableEntity, wantMsg: []string{"spec: quantities must match"}},
		{name: "null body", method: http.MethodPut, body: `null`, wantCode: http.StatusBadRequest, wantMsg: []string{"JSON object"}},
		{name: "array body", method: http.MethodPut, body: `[1]`, wantCode: http.StatusBadRequest, wantMsg: []string{"decoding request body"}},
		{name: "two values", method: http.MethodPut, body: ok + ok, wantCode: http.StatusBadRequest, wantMsg: []string{"single JSON value"}},
		{name: "force is not a boolean", method: http.MethodPut, path: "?force=maybe", body: ok, wantCode: http.StatusBadRequest, wantMsg: []string{`force="maybe"`}},
		{name: "a token the apiserver refuses", method: http.MethodGet, user: "-", wantCode: http.StatusUnauthorized, wantMsg: []string{"Unauthorized"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.apiserver != nil {
				e.react = func(a k8stesting.Action) (bool, runtime.Object, error) {
					return a.GetResource().Resource == "elasticwebs", nil, tc.apiserver
				}
			}
			if tc.deny {
				e.deny = func(string, *authorizationv1.ResourceAttributes) bool { return true }
			}
			user := "alice"
			if tc.user == "-" {
				user = "" // forged below
			}
			var msg string
			var code int
			if user == "" {
				req, _ := http.NewRequest(tc.method, e.url+"/v1/namespaces/ns/elasticwebs/shop", nil)
				req.Header.Set("Authorization", "Bearer forged")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				code, msg = resp.StatusCode, "Unauthorized"
			} else {
				code = e.do(tc.method, "/v1/namespaces/ns/elasticwebs/shop"+tc.path, user, tc.body, &msg)
			}
			if code != tc.wantCode {
				t.Errorf("%s: %d %q, want %d", tc.method, code, msg, tc.wantCode)
			}
			for _, w := range tc.wantMsg {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			if n := len(e.callLog()); n != tc.wantCalls {
				t.Errorf("%d apiserver calls, want %d", n, tc.wantCalls)
			}
		})
	}
}

// TestElasticWebWithoutDynamicClient: a Server built without DynamicFor
// answers the elastic web routes with an error, not a panic.
func TestElasticWebWithoutDynamicClient(t *testing.T) {
	e := newEnv(t)
	e.srv.dynamicFor = nil
	var msg string
	if code := e.do(http.MethodGet, "/v1/namespaces/ns/elasticwebs/shop", "alice", "", &msg); code != http.StatusInternalServerError || !strings.Contains(msg, "not configured") {
		t.Errorf("GET: %d %q, want 500 not configured", code, msg)
	}
}

// TestOpenAPIElasticWebMatchesTheTypes: the document's ElasticWebSpec and
// ElasticWebStatus name exactly the JSON fields of the API types.
func TestOpenAPIElasticWebMatchesTheTypes(t *testing.T) {
	schemas := openAPIDocument()["components"].(obj)["schemas"].(obj)
	for _, tc := range []struct {
		schema string
		typ    any
	}{
		{"ElasticWebSpec", v1alpha1.ElasticWebSpec{}},
		{"ElasticWebStatus", v1alpha1.ElasticWebStatus{}},
		{"ElasticWeb", ElasticWeb{}},
	} {
		props := schemas[tc.schema].(obj)["properties"].(obj)
		rt := reflect.TypeOf(tc.typ)
		fields := map[string]bool{}
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			fields[name] = true
			if _, ok := props[name]; !ok {
				t.Errorf("%s: field %s is not documented", tc.schema, name)
			}
		}
		for p := range props {
			if !fields[p] {
				t.Errorf("%s: documented property %s is not a field", tc.schema, p)
			}
		}
	}
}
