// Package capacitysource is capscale-controller's capacity-source mirror:
// it reads each node's underlay-IP capacity from the cluster's IPAM (a
// CiliumNode, an Azure CNS NodeNetworkConfig, a CRD of your own) and
// writes it onto the Node, where the one rule (internal/underlay) reads it
// in every mode.
//
// A capacity source is data: a resource (group, version, resource), a CEL
// expression over object naming the node an object maps to, a CEL
// expression giving the node's capacity, and optionally the nodes it
// covers (a label selector). Presets are sources written for a known IPAM.
// The file (--capacity-sources) decodes strictly; an expression that does
// not compile is an error at start that names the source.
//
// Decisions are plain functions (Evaluate, Want, PatchFor); Mirror is the
// controller around them: a dynamic informer per source that keeps only
// each object's evaluated result, a node informer, a workqueue of node
// names, and one merge patch of a Node's annotations per change.
package capacitysource

import (
	"fmt"
	"os"

	"github.com/google/cel-go/cel"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/capscale/capscale/internal/strictyaml"
)

// MaxFileSize bounds the file; a larger one is refused rather than read.
const MaxFileSize = 1 << 20

// File is the --capacity-sources file.
type File struct {
	// Sources are read in order; a node covered by two is invalid.
	Sources []Source `json:"sources"`
}

// Source is one capacity source as written. With Preset, the preset's
// resource, namespace, node and capacity fill what the source leaves out.
type Source struct {
	// Name names the source in the Node's capscale.io/underlay-ip-source
	// annotation, Events, logs and metrics: a DNS label.
	Name string `json:"name"`
	// Preset names a preset (Presets): its fields are the defaults.
	Preset string `json:"preset,omitempty"`
	// Resource is the IPAM's resource the source watches.
	Resource *Resource `json:"resource,omitempty"`
	// Namespace restricts a namespaced resource to one namespace (and its
	// RBAC to a Role there); empty watches every namespace.
	Namespace string `json:"namespace,omitempty"`
	// Node is a CEL expression over object: the name of the node the
	// object maps to ("" for none), e.g. object.metadata.name.
	Node string `json:"node,omitempty"`
	// Capacity is a CEL expression over object: the node's underlay IPs,
	// an int from 0 to 1048576.
	Capacity string `json:"capacity,omitempty"`
	// MaxCapacity, optional, is a CEL expression over object: what the
	// node's pool may grow to (an ENI limit, a max-allocate), an int as
	// Capacity, or an optional int whose none means the object does not
	// say. It is information only, mirrored beside the capacity: no mode
	// schedules on it.
	MaxCapacity string `json:"maxCapacity,omitempty"`
	// Used, when set, is a CEL expression over object: how many of the
	// node's underlay IPs the IPAM reports in use, pods' or not, an int
	// from 0 to 1048576. The mirror writes it to the node's
	// capscale.io/underlay-ip-source-used annotation, and the rule charges
	// the node the larger of it and what the pods hold: an IP a
	// force-deleted pod left is free only once the IPAM has it back.
	Used string `json:"used,omitempty"`
	// UsedFrom, when set instead of Used, reads the IPs in use from a
	// second resource whose objects map to nodes (UsedFrom).
	UsedFrom *UsedFrom `json:"usedFrom,omitempty"`
	// NodeSelector, when set, names the nodes the source covers, and only
	// those: such a node without an object is invalid (capacity 0), not
	// left to the label or the default, and an object that maps to
	// another node is ignored. Without it, the source covers the nodes its
	// objects map to.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Draws says which pods of a node take an IP from the pool Capacity
	// counts: "all" (every pod that is not hostNetwork) or "marked" (only
	// pods that ask for capscale.io/underlay-ip). A preset gives its
	// IPAM's answer; a source of your own must say (see validateDraws).
	Draws string `json:"draws,omitempty"`
}

// Resource is a group, version and resource (plural), as in RBAC.
type Resource struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

// GVR is the resource for the dynamic client.
func (r Resource) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
}

// String is the resource as kubectl names it: resource.group.
func (r Resource) String() string {
	return r.GVR().GroupResource().String()
}

// Decode parses a file strictly (unknown fields are errors) and checks it
// without compiling its expressions (Compile does).
func Decode(data []byte) (*File, error) {
	return strictyaml.Decode(data, MaxFileSize, "capacity sources", (*File).Validate)
}

// Load reads, decodes and compiles the file at path.
func Load(path string) ([]*Compiled, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading capacity sources: %w", err)
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("capacity sources %s: %d bytes, more than the %d allowed", path, st.Size(), MaxFileSize)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading capacity sources: %w", err)
	}
	f, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cs, err := f.Compile()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cs, nil
}

// Validate checks every field (presets expanded) and returns all problems,
// each named by its path, e.g. sources[1].resource.version.
func (f *File) Validate() field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i := range f.Sources {
		p := field.NewPath("sources").Index(i)
		s, err := f.Sources[i].Expand()
		if err != nil {
			errs = append(errs, field.NotSupported(p.Child("preset"), f.Sources[i].Preset, PresetNames()))
			continue
		}
		errs = append(errs, s.validate(p)...)
		if s.Name != "" {
			if seen[s.Name] {
				errs = append(errs, field.Duplicate(p.Child("name"), s.Name))
			}
			seen[s.Name] = true
		}
	}
	return errs
}

func (s *Source) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, strictyaml.Name(p.Child("name"), s.Name, true, "names the source on Nodes, in Events and metrics", validation.IsDNS1123Label)...)
	errs = append(errs, validateWatched(p, s.Resource, s.Namespace, "group, version and resource, or a preset")...)
	if s.Node == "" {
		errs = append(errs, field.Required(p.Child("node"), "a CEL expression naming the node an object maps to, e.g. object.metadata.name"))
	}
	if s.Capacity == "" {
		errs = append(errs, field.Required(p.Child("capacity"), "a CEL expression giving the node's underlay IPs"))
	}
	if s.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(s.NodeSelector); err != nil {
			errs = append(errs, field.Invalid(p.Child("nodeSelector"), s.NodeSelector, err.Error()))
		}
	}
	errs = append(errs, s.validateDraws(p)...)
	errs = append(errs, s.validateUsedFrom(p)...)
	return errs
}

// validateResource checks a group, version and resource at rp.
func validateResource(rp *field.Path, r *Resource) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, strictyaml.Name(rp.Child("group"), r.Group, false, "", validation.IsDNS1123Subdomain)...)
	errs = append(errs, strictyaml.Name(rp.Child("version"), r.Version, true, "", validation.IsDNS1035Label)...)
	errs = append(errs, strictyaml.Name(rp.Child("resource"), r.Resource, true, "the plural, as in RBAC", validation.IsDNS1123Subdomain)...)
	return errs
}

// Compiled is a source ready to run: its expressions compiled and its
// selector parsed.
type Compiled struct {
	Name      string
	Resource  Resource
	Namespace string
	Node      *Expression
	Capacity  *Expression
	// MaxCapacity is nil when the source has none.
	MaxCapacity *Expression
	// Used is nil when the source reports no IPs in use.
	Used *Expression
	// UsedFrom is nil when the source reads no second resource.
	UsedFrom *CompiledUsedFrom
	// Selector is nil when the source covers only the nodes its objects
	// map to.
	Selector labels.Selector
	// Draws is underlay.DrawsAll or underlay.DrawsMarked.
	Draws string
}

// Compile validates the file and compiles every expression. The first
// problem is an error naming the source and the field, e.g.
// `sources[0] (cilium): capacity: ERROR: <input>:1:8: undeclared reference to 'objet'`.
func (f *File) Compile() ([]*Compiled, error) {
	if errs := f.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid capacity sources: %w", errs.ToAggregate())
	}
	out := make([]*Compiled, 0, len(f.Sources))
	for i := range f.Sources {
		s, _ := f.Sources[i].Expand()
		c, err := s.compile(CostLimit)
		if err != nil {
			return nil, fmt.Errorf("sources[%d] (%s): %w", i, s.Name, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func (s *Source) compile(limit uint64) (*Compiled, error) {
	node, err := compile(s.Node, cel.StringType, limit)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	capacity, err := compile(s.Capacity, cel.IntType, limit)
	if err != nil {
		return nil, fmt.Errorf("capacity: %w", err)
	}
	c := &Compiled{Name: s.Name, Resource: *s.Resource, Namespace: s.Namespace, Node: node, Capacity: capacity, Draws: s.Draws}
	if s.MaxCapacity != "" {
		if c.MaxCapacity, err = compile(s.MaxCapacity, cel.OptionalType(cel.IntType), limit); err != nil {
			return nil, fmt.Errorf("maxCapacity: %w", err)
		}
	}
	if c.Used, err = compileUsed(s.Used, limit); err != nil {
		return nil, err
	}
	if c.UsedFrom, err = compileUsedFrom(s.UsedFrom, limit); err != nil {
		return nil, err
	}
	if s.NodeSelector != nil {
		if c.Selector, err = metav1.LabelSelectorAsSelector(s.NodeSelector); err != nil {
			return nil, fmt.Errorf("nodeSelector: %w", err)
		}
	}
	return c, nil
}

// compileUsed compiles the optional used expression like capacity; ""
// gives nil.
func compileUsed(src string, limit uint64) (*Expression, error) {
	if src == "" {
		return nil, nil
	}
	used, err := compile(src, cel.IntType, limit)
	if err != nil {
		return nil, fmt.Errorf("used: %w", err)
	}
	return used, nil
}

// validateWatched checks the resource and namespace of the objects a
// source (or its usedFrom) watches; missing says what the resource is for.
func validateWatched(p *field.Path, r *Resource, namespace, missing string) field.ErrorList {
	var errs field.ErrorList
	if r == nil {
		errs = append(errs, field.Required(p.Child("resource"), missing))
	} else {
		errs = append(errs, validateResource(p.Child("resource"), r)...)
	}
	if namespace != "" {
		for _, msg := range validation.IsDNS1123Label(namespace) {
			errs = append(errs, field.Invalid(p.Child("namespace"), namespace, msg))
		}
	}
	return errs
}

// objectRef names an object of r in Results and on Nodes.
func objectRef(r Resource, namespace, name string) string {
	if namespace != "" {
		return r.String() + "/" + namespace + "/" + name
	}
	return r.String() + "/" + name
}
