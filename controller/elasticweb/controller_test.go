package elasticweb

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestIsUIDMismatch: the apiserver's answer to an apply whose uid is not the
// object's is recognised (wrapped, as apply returns it), and nothing else is.
func TestIsUIDMismatch(t *testing.T) {
	gk := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	uid := apierrors.NewInvalid(gk, "shop", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "a", "field is immutable")})
	other := apierrors.NewInvalid(gk, "shop", field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), -1, "must be >= 0")})
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"uid immutable", fmt.Errorf("applying Deployment x/shop: %w", uid), true},
		{"uid of no object", apierrors.NewConflict(schema.GroupResource{Resource: "deployments"}, "shop", errors.New("uid mismatch: the provided object specified uid 1, and no existing object was found")), true},
		{"another invalid field", other, false},
		{"conflict", apierrors.NewConflict(schema.GroupResource{Resource: "deployments"}, "shop", errors.New("x")), false},
		{"plain error", errors.New("metadata.uid"), false},
	} {
		if got := isUIDMismatch(tc.err); got != tc.want {
			t.Errorf("%s: isUIDMismatch = %v, want %v", tc.name, got, tc.want)
		}
	}
}
