package schedplugin

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/internal/underlay"
)

// DefaultCapacity is the capacity of a node with neither the
// capscale.io/underlay-ip-capacity annotation nor the label, when the
// profile's pluginConfig does not set defaultCapacity: the extender's and the
// publisher's --default-capacity default.
const DefaultCapacity int64 = 10

// Args is the plugin's pluginConfig in a KubeSchedulerConfiguration:
//
//	pluginConfig:
//	- name: UnderlayIP
//	  args:
//	    defaultCapacity: 10
type Args struct {
	// DefaultCapacity is the capacity of a node with neither the annotation
	// nor the label: 0 to 1048576; DefaultCapacity when absent.
	DefaultCapacity *int64 `json:"defaultCapacity,omitempty"`
	// AwaitCapacitySource is set where capacity sources are configured
	// (deploy/capacity-sources and the chart set it): a node the mirror has
	// not read yet counts 0, "capacity source not read yet", never the
	// label or the default (underlay.Rule.AwaitSource). Default false.
	AwaitCapacitySource bool `json:"awaitCapacitySource,omitempty"`
	// CapacitySources is the path of the capacity-sources file
	// capscale-controller reads (its --capacity-sources): the plugin then
	// reads the IPAM's objects itself, and what they say of a node
	// replaces the mirror's annotations on the Node (sourced.go). It needs
	// awaitCapacitySource. Default: none, the Node's annotations.
	CapacitySources string `json:"capacitySources,omitempty"`
}

// Rule is the capacity rule these args configure.
func (a Args) Rule() underlay.Rule {
	return underlay.Rule{Default: *a.DefaultCapacity, AwaitSource: a.AwaitCapacitySource}
}

// DecodeArgs reads the plugin's args as kube-scheduler hands them to an
// out-of-tree plugin: nil when the profile has no pluginConfig for it, else
// a *runtime.Unknown holding JSON (or YAML). Unknown fields are errors, so a
// misspelt key does not silently leave the default in place.
func DecodeArgs(obj runtime.Object) (Args, error) {
	var args Args
	if obj != nil {
		u, ok := obj.(*runtime.Unknown)
		if !ok {
			return Args{}, fmt.Errorf("%s args: want *runtime.Unknown, got %T", Name, obj)
		}
		raw := u.Raw
		switch u.ContentType {
		case runtime.ContentTypeJSON, "":
		case runtime.ContentTypeYAML:
			var err error
			if raw, err = yaml.YAMLToJSON(raw); err != nil {
				return Args{}, fmt.Errorf("%s args: %w", Name, err)
			}
		default:
			return Args{}, fmt.Errorf("%s args: content type %q is not supported", Name, u.ContentType)
		}
		if len(bytes.TrimSpace(raw)) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&args); err != nil {
				return Args{}, fmt.Errorf("%s args: %w", Name, err)
			}
		}
	}
	if args.DefaultCapacity == nil {
		d := DefaultCapacity
		args.DefaultCapacity = &d
	}
	if args.CapacitySources != "" && !args.AwaitCapacitySource {
		return Args{}, fmt.Errorf("%s args: capacitySources needs awaitCapacitySource: true, or a node the plugin has not read yet would take the label or the default", Name)
	}
	if c := *args.DefaultCapacity; c < 0 || c > underlay.MaxCapacity {
		return Args{}, fmt.Errorf("%s args: defaultCapacity must be between 0 and %d, got %d", Name, underlay.MaxCapacity, c)
	}
	return args, nil
}
