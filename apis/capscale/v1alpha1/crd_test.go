package v1alpha1_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
)

// crdFile is the CRD as deploy/ installs it.
var crdFile = filepath.Join("..", "..", "..", "deploy", "crd", "elasticwebs.yaml")

// loadCRD decodes the CRD strictly, validates it as the apiserver would on
// create (schema structure, CEL compilation and cost) and returns the
// internal form of v1alpha1's schema.
func loadCRD(t *testing.T) (*apiextensionsv1.CustomResourceDefinition, *apiextensions.JSONSchemaProps) {
	t.Helper()
	b, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatalf("decoding %s: %v", crdFile, err)
	}
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := apiextensions.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	s.Default(&crd)
	var internal apiextensions.CustomResourceDefinition
	if err := s.Convert(&crd, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), &internal); len(errs) > 0 {
		t.Fatalf("the apiserver would refuse the CRD: %v", errs.ToAggregate())
	}
	if len(internal.Spec.Versions) != 1 || internal.Spec.Versions[0].Name != v1alpha1.SchemeGroupVersion.Version {
		t.Fatalf("want exactly version %s", v1alpha1.SchemeGroupVersion.Version)
	}
	if crd.Spec.Group != v1alpha1.GroupName || crd.Spec.Names.Kind != v1alpha1.ElasticWebKind || crd.Spec.Names.Plural != v1alpha1.ElasticWebResource.Resource {
		t.Errorf("CRD names %s/%s/%s do not match the Go package", crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural)
	}
	// With one version the internal form hoists the schema to spec.validation.
	v := internal.Spec.Validation
	if v == nil {
		v = internal.Spec.Versions[0].Schema
	}
	if v == nil || v.OpenAPIV3Schema == nil {
		t.Fatal("the CRD has no schema")
	}
	return &crd, v.OpenAPIV3Schema
}

// full is an ElasticWeb with every field set.
func full() *v1alpha1.ElasticWeb {
	return &v1alpha1.ElasticWeb{
		TypeMeta:   metav1.TypeMeta{APIVersion: "capscale.io/v1alpha1", Kind: "ElasticWeb"},
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "default", Generation: 3},
		Spec: v1alpha1.ElasticWebSpec{
			Image: "registry.example/web:2", Port: 8080, SinglePodQPS: 500, TotalQPS: 1800,
			MinReplicas: ptr.To[int32](1), MaxReplicas: ptr.To[int32](8),
			Resources: &v1alpha1.ContainerResources{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
			},
		},
		Status: v1alpha1.ElasticWebStatus{
			ObservedGeneration: 3, QPSReplicas: 4, DesiredReplicas: 4, ReadyReplicas: 2, RealQPS: 1000, NodePort: 30080,
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, ObservedGeneration: 3, LastTransitionTime: metav1.Now(), Reason: "Scaling", Message: "2 of 4 ready"}},
		},
	}
}

func toMap(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	// As the apiserver decodes: integers as int64, the rest as float64.
	var m map[string]any
	if err := utiljson.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSchemaKeepsEveryGoField: a fully set object survives the apiserver's
// pruning unchanged, so no Go field is missing from the schema.
func TestSchemaKeepsEveryGoField(t *testing.T) {
	_, schema := loadCRD(t)
	st, err := structuralschema.NewStructural(schema)
	if err != nil {
		t.Fatal(err)
	}
	obj := toMap(t, full())
	pruned := pruning.PruneWithOptions(obj, st, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(pruned) > 0 {
		t.Errorf("the apiserver would drop fields the Go types have: %v", pruned)
	}
}

// TestSchemaMatchesGoTypes walks the Go types and the schema side by side:
// same property names, same JSON types, required exactly where the Go field
// has no omitempty, and a description (kubectl explain) on every property.
func TestSchemaMatchesGoTypes(t *testing.T) {
	_, schema := loadCRD(t)
	for _, part := range []string{"spec", "status"} {
		f, _ := reflect.TypeOf(v1alpha1.ElasticWeb{}).FieldByName(strings.ToUpper(part[:1]) + part[1:])
		prop := schema.Properties[part]
		compare(t, part, f.Type, &prop)
	}
}

var (
	quantityType  = reflect.TypeOf(resource.Quantity{})
	conditionType = reflect.TypeOf(metav1.Condition{})
	timeType      = reflect.TypeOf(metav1.Time{})
)

func compare(t *testing.T, path string, typ reflect.Type, s *apiextensions.JSONSchemaProps) {
	t.Helper()
	if s.Description == "" {
		t.Errorf("%s: no description (kubectl explain shows nothing)", path)
	}
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := map[reflect.Kind]string{
		reflect.String: "string", reflect.Int32: "integer", reflect.Int64: "integer",
		reflect.Float64: "number", reflect.Struct: "object", reflect.Map: "object", reflect.Slice: "array",
	}[typ.Kind()]
	switch typ {
	case timeType:
		if s.Type != "string" || s.Format != "date-time" {
			t.Errorf("%s: a time must be a date-time string", path)
		}
		return
	case quantityType:
		if !s.XIntOrString {
			t.Errorf("%s: a quantity must be x-kubernetes-int-or-string", path)
		}
		return
	}
	if s.Type != want {
		t.Errorf("%s: schema type %q, Go type %s wants %q", path, s.Type, typ, want)
		return
	}
	switch typ.Kind() {
	case reflect.Map:
		if s.AdditionalProperties == nil || s.AdditionalProperties.Schema == nil {
			t.Errorf("%s: a map needs additionalProperties", path)
			return
		}
		ap := *s.AdditionalProperties.Schema
		ap.Description = "-" // the map's description covers its values
		compare(t, path+"[*]", typ.Elem(), &ap)
	case reflect.Slice:
		if s.Items == nil || s.Items.Schema == nil {
			t.Errorf("%s: an array needs items", path)
			return
		}
		it := *s.Items.Schema
		it.Description = "-"
		if typ.Elem() == conditionType && (s.XListType == nil || *s.XListType != "map" || !reflect.DeepEqual(s.XListMapKeys, []string{"type"})) {
			t.Errorf("%s: conditions must be a map list keyed by type, for server-side apply", path)
		}
		compare(t, path+"[*]", typ.Elem(), &it)
	case reflect.Struct:
		fields := map[string]bool{}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				t.Errorf("%s.%s: every field needs a json name", path, f.Name)
				continue
			}
			fields[name] = true
			prop, ok := s.Properties[name]
			if !ok {
				t.Errorf("%s.%s: in the Go type, not in the schema", path, name)
				continue
			}
			required := contains(s.Required, name)
			optional := strings.Contains(opts, "omitempty")
			if path != "status" && required == optional {
				t.Errorf("%s.%s: required=%v in the schema but omitempty=%v in Go", path, name, required, optional)
			}
			compare(t, path+"."+name, f.Type, &prop)
		}
		for name := range s.Properties {
			if !fields[name] {
				t.Errorf("%s.%s: in the schema, not in the Go type", path, name)
			}
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestValidation runs the schema and its CEL rules as the apiserver does on
// create, and checks that each bad spec is refused naming its field.
func TestValidation(t *testing.T) {
	_, schema := loadCRD(t)
	st, err := structuralschema.NewStructural(schema)
	if err != nil {
		t.Fatal(err)
	}
	sv, _, err := apiservervalidation.NewSchemaValidator(schema)
	if err != nil {
		t.Fatal(err)
	}
	celv := cel.NewValidator(st, true, celconfig.PerCallLimit)
	tests := []struct {
		name  string
		edit  func(*v1alpha1.ElasticWebSpec)
		field string // "" when valid
	}{
		{name: "full spec", edit: func(*v1alpha1.ElasticWebSpec) {}},
		{name: "zero total QPS", edit: func(s *v1alpha1.ElasticWebSpec) { s.TotalQPS = 0 }},
		{name: "fractional QPS", edit: func(s *v1alpha1.ElasticWebSpec) { s.SinglePodQPS, s.TotalQPS = 0.1, 1.1 }},
		{name: "no bounds", edit: func(s *v1alpha1.ElasticWebSpec) { s.MinReplicas, s.MaxReplicas = nil, nil }},
		{name: "max equals min", edit: func(s *v1alpha1.ElasticWebSpec) { s.MinReplicas, s.MaxReplicas = ptr.To[int32](3), ptr.To[int32](3) }},
		{name: "zero single-pod QPS", edit: func(s *v1alpha1.ElasticWebSpec) { s.SinglePodQPS = 0 }, field: "spec.singlePodQPS"},
		{name: "negative single-pod QPS", edit: func(s *v1alpha1.ElasticWebSpec) { s.SinglePodQPS = -5 }, field: "spec.singlePodQPS"},
		{name: "negative total QPS", edit: func(s *v1alpha1.ElasticWebSpec) { s.TotalQPS = -1 }, field: "spec.totalQPS"},
		{name: "port 0", edit: func(s *v1alpha1.ElasticWebSpec) { s.Port = 0 }, field: "spec.port"},
		{name: "port 65536", edit: func(s *v1alpha1.ElasticWebSpec) { s.Port = 65536 }, field: "spec.port"},
		{name: "max below min", edit: func(s *v1alpha1.ElasticWebSpec) { s.MinReplicas, s.MaxReplicas = ptr.To[int32](5), ptr.To[int32](4) }, field: "spec.maxReplicas"},
		{name: "max 0 with default min", edit: func(s *v1alpha1.ElasticWebSpec) { s.MinReplicas, s.MaxReplicas = nil, ptr.To[int32](0) }, field: "spec.maxReplicas"},
		{name: "no image", edit: func(s *v1alpha1.ElasticWebSpec) { s.Image = "" }, field: "spec.image"},
		{name: "image with a space", edit: func(s *v1alpha1.ElasticWebSpec) { s.Image = "web 2" }, field: "spec.image"},
		{name: "cpu request", edit: func(s *v1alpha1.ElasticWebSpec) {
			s.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ew := full()
			ew.Status = v1alpha1.ElasticWebStatus{}
			tc.edit(&ew.Spec)
			obj := toMap(t, ew)
			delete(obj, "status")
			errs := apiservervalidation.ValidateCustomResource(nil, obj, sv)
			celErrs, _ := celv.Validate(context.Background(), nil, st, obj, nil, celconfig.RuntimeCELCostBudget)
			errs = append(errs, celErrs...)
			if tc.field == "" {
				if len(errs) > 0 {
					t.Errorf("want valid, got %v", errs.ToAggregate())
				}
				return
			}
			if !namesField(errs, tc.field) {
				t.Errorf("want an error naming %s, got %v", tc.field, errs.ToAggregate())
			}
		})
	}
}

func namesField(errs field.ErrorList, f string) bool {
	for _, e := range errs {
		if e.Field == f {
			return true
		}
	}
	return false
}

// TestRequiredFields: a spec without its four values is refused, each named.
func TestRequiredFields(t *testing.T) {
	_, schema := loadCRD(t)
	sv, _, err := apiservervalidation.NewSchemaValidator(schema)
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{"apiVersion": "capscale.io/v1alpha1", "kind": "ElasticWeb", "metadata": map[string]any{"name": "x"}, "spec": map[string]any{}}
	errs := apiservervalidation.ValidateCustomResource(nil, obj, sv)
	for _, f := range []string{"spec.image", "spec.port", "spec.singlePodQPS", "spec.totalQPS"} {
		if !namesField(errs, f) {
			t.Errorf("an empty spec: no error naming %s in %v", f, errs.ToAggregate())
		}
	}
}

// TestHelmChartShipsTheSameCRD: the chart's crds/ copy is the deploy/ file.
func TestHelmChartShipsTheSameCRD(t *testing.T) {
	a, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "helm", "capscale", "crds", "elasticwebs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("deploy/helm/capscale/crds/elasticwebs.yaml differs from %s: copy it", crdFile)
	}
}
