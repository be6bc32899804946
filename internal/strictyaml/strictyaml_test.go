package strictyaml

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

type file struct {
	Name string `json:"name"`
}

func validate(f *file) field.ErrorList {
	if f.Name == "" {
		return field.ErrorList{field.Required(field.NewPath("name"), "")}
	}
	return nil
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{in: "name: a"},
		{in: `{"name": "a"}`},
		{in: "name: a\nnmae: b", err: `decoding thing: error unmarshaling JSON: while decoding JSON: json: unknown field "nmae"`},
		{in: "other: 1", err: "decoding thing"},
		{in: "{}", err: "invalid thing: name: Required value"},
		{in: "name: " + strings.Repeat("a", 64), err: "thing is 70 bytes, more than the 32 allowed"},
	} {
		got, err := Decode([]byte(tc.in), 32, "thing", validate)
		if tc.err == "" {
			if err != nil || got.Name != "a" {
				t.Errorf("%q: %+v, %v", tc.in, got, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
			t.Errorf("%q: error %v, want one starting %q", tc.in, err, tc.err)
		}
	}
}

func TestName(t *testing.T) {
	p := field.NewPath("x")
	if errs := Name(p, "", true, "why", validation.IsDNS1123Label); len(errs) != 1 || errs[0].Type != field.ErrorTypeRequired || errs[0].Detail != "why" {
		t.Errorf("required and empty: %v", errs)
	}
	if errs := Name(p, "", false, "", validation.IsDNS1123Label); len(errs) != 0 {
		t.Errorf("optional and empty: %v", errs)
	}
	if errs := Name(p, "Not_OK", true, "", validation.IsDNS1123Label); len(errs) == 0 || errs[0].Type != field.ErrorTypeInvalid {
		t.Errorf("invalid: %v", errs)
	}
	if errs := Name(p, "ok-1", true, "", validation.IsDNS1123Label); len(errs) != 0 {
		t.Errorf("valid: %v", errs)
	}
}
