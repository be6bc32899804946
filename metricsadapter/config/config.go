// Package config is the metrics adapter's configuration file: load-index
// sources and load-step policies. It decodes strictly (unknown fields are
// errors), validates with field-named errors and watches the file for changes.
package config

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/jsonpath"

	"golang.org/x/net/http/httpguts"

	"github.com/capscale/capscale/internal/strictyaml"
)

// MaxFileSize bounds the configuration file; a larger file is rejected rather
// than read into memory.
const MaxFileSize = 1 << 20

// Config is the whole configuration file.
type Config struct {
	// Sources are the third-party load-index endpoints.
	Sources []Source `json:"sources,omitempty"`
	// StepPolicies map a workload to a source and a load-step rule.
	StepPolicies []StepPolicy `json:"stepPolicies,omitempty"`
}

// Source is one HTTP endpoint polled for a load index.
type Source struct {
	// Name is the value of the metric's source label.
	Name string `json:"name"`
	// URL is fetched with GET.
	URL string `json:"url"`
	// JSONPath selects the number in the response, in
	// k8s.io/client-go/util/jsonpath syntax, e.g. {.data.load_balance}.
	JSONPath string `json:"jsonPath"`
	// Interval between polls.
	Interval metav1.Duration `json:"interval"`
	// Timeout of one poll, including reading the whole body.
	Timeout metav1.Duration `json:"timeout"`
	// MaxAge is how old the last good sample may be before the metric is an
	// error (or Fallback is served).
	MaxAge metav1.Duration `json:"maxAge"`
	// Fallback, when set, is served instead of an error once the last good
	// sample is older than MaxAge or there has been none.
	Fallback *float64 `json:"fallback,omitempty"`
	// TLS configures verification of an https URL.
	TLS TLS `json:"tls,omitempty"`
	// Headers are sent with every request.
	Headers map[string]string `json:"headers,omitempty"`
	// BearerTokenFile, when set, is read before every request and sent as
	// "Authorization: Bearer <token>".
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
}

// TLS configures server verification for a source.
type TLS struct {
	// CAFile is a PEM bundle trusted in addition to the system roots.
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipVerify disables verification. It is logged loudly.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// WorkloadRef names a Deployment or StatefulSet.
type WorkloadRef struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
}

// String renders the reference as "Kind namespace/name".
func (w WorkloadRef) String() string {
	return w.Kind + " " + w.Namespace + "/" + w.Name
}

// The workload kinds a step policy may name.
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
)

// StepPolicy is the load-step rule for one workload.
type StepPolicy struct {
	Workload       WorkloadRef     `json:"workload"`
	Source         string          `json:"source"`
	ScaleUpAbove   float64         `json:"scaleUpAbove"`
	ScaleDownBelow float64         `json:"scaleDownBelow"`
	StepUp         int32           `json:"stepUp"`
	StepDown       int32           `json:"stepDown"`
	MinReplicas    int32           `json:"minReplicas"`
	MaxReplicas    int32           `json:"maxReplicas"`
	MinPodAge      metav1.Duration `json:"minPodAge"`
	Interval       metav1.Duration `json:"interval"`
}

// Decode parses YAML (or JSON) strictly and validates the result.
func Decode(data []byte) (*Config, error) {
	return strictyaml.Decode(data, MaxFileSize, "config", (*Config).Validate)
}

// Validate checks every field and returns all problems, each named by its
// path (e.g. sources[1].timeout).
func (c *Config) Validate() field.ErrorList {
	var errs field.ErrorList
	srcPath := field.NewPath("sources")
	sources := make(map[string]bool, len(c.Sources))
	for i := range c.Sources {
		s := &c.Sources[i]
		p := srcPath.Index(i)
		errs = append(errs, s.validate(p)...)
		if s.Name != "" {
			if sources[s.Name] {
				errs = append(errs, field.Duplicate(p.Child("name"), s.Name))
			}
			sources[s.Name] = true
		}
	}

	polPath := field.NewPath("stepPolicies")
	// The metric selector is workload=NAME in the request's namespace, with
	// no kind, so two policies for the same namespace/name would be ambiguous
	// even if their kinds differ.
	workloads := make(map[string]bool, len(c.StepPolicies))
	for i := range c.StepPolicies {
		sp := &c.StepPolicies[i]
		p := polPath.Index(i)
		errs = append(errs, sp.validate(p, sources)...)
		key := sp.Workload.Namespace + "/" + sp.Workload.Name
		if sp.Workload.Name != "" && sp.Workload.Namespace != "" {
			if workloads[key] {
				errs = append(errs, field.Duplicate(p.Child("workload"), key))
			}
			workloads[key] = true
		}
	}
	return errs
}

func (s *Source) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), "the value of the source label"))
	} else {
		for _, msg := range validation.IsValidLabelValue(s.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), s.Name, msg))
		}
	}

	if s.URL == "" {
		errs = append(errs, field.Required(p.Child("url"), ""))
	} else if u, err := url.Parse(s.URL); err != nil {
		errs = append(errs, field.Invalid(p.Child("url"), s.URL, err.Error()))
	} else {
		if u.Scheme != "http" && u.Scheme != "https" {
			errs = append(errs, field.NotSupported(p.Child("url").Key("scheme"), u.Scheme, []string{"http", "https"}))
		}
		if u.Host == "" {
			errs = append(errs, field.Invalid(p.Child("url"), s.URL, "has no host"))
		}
		if u.User != nil {
			// Credentials in the URL would end up in logs; headers and
			// bearerTokenFile exist for that.
			errs = append(errs, field.Invalid(p.Child("url"), redactedURL(u), "must not contain credentials; use headers or bearerTokenFile"))
		}
		if u.Scheme == "http" && (s.TLS.CAFile != "" || s.TLS.InsecureSkipVerify) {
			errs = append(errs, field.Invalid(p.Child("tls"), "", "is set but the url is not https"))
		}
	}

	if s.JSONPath == "" {
		errs = append(errs, field.Required(p.Child("jsonPath"), "e.g. {.data.load_balance}"))
	} else if t := strings.TrimSpace(s.JSONPath); !strings.HasPrefix(t, "{") || !strings.HasSuffix(t, "}") {
		// Without braces the template is literal text, and every poll would
		// fail with "not a number".
		errs = append(errs, field.Invalid(p.Child("jsonPath"), s.JSONPath, "must be a template in braces, e.g. {.data.load_balance}"))
	} else if err := jsonpath.New(s.Name).Parse(s.JSONPath); err != nil {
		errs = append(errs, field.Invalid(p.Child("jsonPath"), s.JSONPath, err.Error()))
	}

	errs = append(errs, positive(p.Child("interval"), s.Interval.Duration)...)
	errs = append(errs, positive(p.Child("timeout"), s.Timeout.Duration)...)
	errs = append(errs, positive(p.Child("maxAge"), s.MaxAge.Duration)...)
	if s.Timeout.Duration > s.Interval.Duration && s.Interval.Duration > 0 {
		errs = append(errs, field.Invalid(p.Child("timeout"), s.Timeout.Duration.String(),
			fmt.Sprintf("must not be longer than interval (%s)", s.Interval.Duration)))
	}
	if s.MaxAge.Duration < s.Interval.Duration && s.MaxAge.Duration > 0 {
		// A sample would turn stale between two successful polls.
		errs = append(errs, field.Invalid(p.Child("maxAge"), s.MaxAge.Duration.String(),
			fmt.Sprintf("must not be shorter than interval (%s)", s.Interval.Duration)))
	}

	if s.Fallback != nil && (math.IsNaN(*s.Fallback) || math.IsInf(*s.Fallback, 0) || *s.Fallback < 0) {
		errs = append(errs, field.Invalid(p.Child("fallback"), *s.Fallback, "must be a finite number >= 0"))
	}
	if s.TLS.CAFile != "" && s.TLS.InsecureSkipVerify {
		errs = append(errs, field.Invalid(p.Child("tls", "insecureSkipVerify"), true, "must not be set together with caFile"))
	}

	for k, v := range s.Headers {
		hp := p.Child("headers").Key(k)
		if !httpguts.ValidHeaderFieldName(k) {
			errs = append(errs, field.Invalid(hp, k, "is not a valid HTTP header name"))
		}
		// Never echo a header value: it is often a secret.
		if !httpguts.ValidHeaderFieldValue(v) {
			errs = append(errs, field.Invalid(hp, "<redacted>", "is not a valid HTTP header value"))
		}
		if strings.EqualFold(k, "Authorization") && s.BearerTokenFile != "" {
			errs = append(errs, field.Forbidden(hp, "Authorization header and bearerTokenFile are mutually exclusive"))
		}
		if strings.EqualFold(k, "Host") || strings.EqualFold(k, "Content-Length") {
			errs = append(errs, field.Forbidden(hp, "is set by the HTTP client"))
		}
	}
	return errs
}

func (sp *StepPolicy) validate(p *field.Path, sources map[string]bool) field.ErrorList {
	var errs field.ErrorList
	wp := p.Child("workload")
	errs = append(errs, strictyaml.Name(wp.Child("namespace"), sp.Workload.Namespace, true, "", validation.IsDNS1123Label)...)
	errs = append(errs, strictyaml.Name(wp.Child("name"), sp.Workload.Name, true, "", validation.IsDNS1123Subdomain)...)
	if sp.Workload.Kind != KindDeployment && sp.Workload.Kind != KindStatefulSet {
		errs = append(errs, field.NotSupported(wp.Child("kind"), sp.Workload.Kind, []string{KindDeployment, KindStatefulSet}))
	}

	if sp.Source == "" {
		errs = append(errs, field.Required(p.Child("source"), "the name of a configured source"))
	} else if !sources[sp.Source] {
		errs = append(errs, field.NotFound(p.Child("source"), sp.Source))
	}

	for _, f := range []struct {
		name string
		v    float64
	}{{"scaleUpAbove", sp.ScaleUpAbove}, {"scaleDownBelow", sp.ScaleDownBelow}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			errs = append(errs, field.Invalid(p.Child(f.name), f.v, "must be a finite number >= 0"))
		}
	}
	if sp.ScaleDownBelow >= sp.ScaleUpAbove {
		errs = append(errs, field.Invalid(p.Child("scaleDownBelow"), sp.ScaleDownBelow,
			fmt.Sprintf("must be less than scaleUpAbove (%v)", sp.ScaleUpAbove)))
	}
	if sp.StepUp < 1 {
		errs = append(errs, field.Invalid(p.Child("stepUp"), sp.StepUp, "must be at least 1"))
	}
	if sp.StepDown < 1 {
		errs = append(errs, field.Invalid(p.Child("stepDown"), sp.StepDown, "must be at least 1"))
	}
	if sp.MinReplicas < 0 {
		errs = append(errs, field.Invalid(p.Child("minReplicas"), sp.MinReplicas, "must not be negative"))
	}
	if sp.MaxReplicas < 1 {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), sp.MaxReplicas, "must be at least 1"))
	}
	if sp.MinReplicas > sp.MaxReplicas {
		errs = append(errs, field.Invalid(p.Child("minReplicas"), sp.MinReplicas,
			fmt.Sprintf("must not be greater than maxReplicas (%d)", sp.MaxReplicas)))
	}
	if sp.MinPodAge.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("minPodAge"), sp.MinPodAge.Duration.String(), "must not be negative"))
	}
	errs = append(errs, positive(p.Child("interval"), sp.Interval.Duration)...)
	return errs
}

func positive(p *field.Path, d time.Duration) field.ErrorList {
	if d <= 0 {
		return field.ErrorList{field.Invalid(p, d.String(), "must be a positive duration, e.g. 30s")}
	}
	return nil
}

// redactedURL prints a URL without its password.
func redactedURL(u *url.URL) string {
	return u.Redacted()
}
