package apiservice

import (
	"encoding/json"
	"fmt"

	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/capscale/capscale/internal/names"
)

// DefaultPort is the Service port an APIService uses when it names none.
const DefaultPort = 443

// Record is what capscale keeps, in the APIService's annotation
// names.DelegateAnnotation, about the server it took the APIService over
// from: the delegate. It lives on the APIService itself so that it changes
// in the same write as the takeover and outlives capscale's namespace.
type Record struct {
	// Spec is the APIService's spec before capscale took it over;
	// `preflight --restore` writes it back unchanged.
	Spec apiregv1.APIServiceSpec `json:"spec"`
	// CABundle verifies the delegate's serving certificate when Spec has
	// none (an APIService registered with insecureSkipTLSVerify).
	CABundle []byte `json:"caBundle,omitempty"`
}

// Target is where the delegate is served and how to verify it.
type Target struct {
	Namespace, Name string
	Port            int32
	// CABundle is PEM; never empty in a valid record.
	CABundle []byte
}

func (t Target) String() string { return fmt.Sprintf("%s/%s:%d", t.Namespace, t.Name, t.Port) }

// Target returns the delegate's Service and CA.
func (r *Record) Target() Target {
	t := Target{Namespace: r.Spec.Service.Namespace, Name: r.Spec.Service.Name, Port: DefaultPort, CABundle: r.CABundle}
	if p := r.Spec.Service.Port; p != nil {
		t.Port = *p
	}
	if len(t.CABundle) == 0 {
		t.CABundle = r.Spec.CABundle
	}
	return t
}

// ParseRecord reads the delegate record of api: nil without one, an error
// when it is malformed or unusable (no Service, no CA to verify it with).
func ParseRecord(api *apiregv1.APIService) (*Record, error) {
	raw, ok := api.Annotations[names.DelegateAnnotation]
	if !ok {
		return nil, nil
	}
	var r Record
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return nil, fmt.Errorf("annotation %s on APIService %s is not a delegate record: %w", names.DelegateAnnotation, api.Name, err)
	}
	if r.Spec.Service == nil || r.Spec.Service.Namespace == "" || r.Spec.Service.Name == "" {
		return nil, fmt.Errorf("annotation %s on APIService %s names no delegate Service", names.DelegateAnnotation, api.Name)
	}
	if len(r.Target().CABundle) == 0 {
		return nil, fmt.Errorf("annotation %s on APIService %s has no CA bundle to verify delegate %s with", names.DelegateAnnotation, api.Name, r.Target())
	}
	return &r, nil
}

func (r *Record) annotation() (string, error) {
	b, err := json.Marshal(r)
	return string(b), err
}
