// Package strictyaml decodes capscale's configuration files one way: a size
// bound, strict YAML (an unknown field is an error, not a silent default)
// and the type's own validation, each error naming the file's kind.
package strictyaml

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// Decode parses data (YAML or JSON) into a new T and validates it; what
// names the file in errors ("config", "capacity sources").
func Decode[T any](data []byte, maxSize int, what string, validate func(*T) field.ErrorList) (*T, error) {
	if len(data) > maxSize {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d allowed", what, len(data), maxSize)
	}
	v := new(T)
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", what, err)
	}
	if errs := validate(v); len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s: %w", what, errs.ToAggregate())
	}
	return v, nil
}

// Name checks one name-like field of such a file: with required, empty is
// Required (detail says why it is needed); a value check refuses is
// Invalid with each of its messages.
func Name(p *field.Path, value string, required bool, detail string, check func(string) []string) field.ErrorList {
	if value == "" {
		if required {
			return field.ErrorList{field.Required(p, detail)}
		}
		return nil
	}
	var errs field.ErrorList
	for _, msg := range check(value) {
		errs = append(errs, field.Invalid(p, value, msg))
	}
	return errs
}
