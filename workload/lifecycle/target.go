package lifecycle

import "fmt"

// Target is the workload a call is about.
type Target struct {
	Namespace, Name string
	Kind            Kind
}

// Resource is the URL and RBAC name of the target's kind.
func (t Target) Resource() string { return t.Kind.Resource() }

// String names the target as errors and logs do: "deployments shop/web".
func (t Target) String() string {
	return fmt.Sprintf("%s %s/%s", t.Resource(), t.Namespace, t.Name)
}

// Refusal is lifecycle declining to act, with a reason for a person (the
// workload API answers 409 with it). Remedy names what the caller can add
// to be served; each front end says it in its own words (a JSON field, a
// flag).
type Refusal struct {
	Reason string
	Remedy Remedy
}

func (e *Refusal) Error() string { return e.Reason }

// Remedy is what a refused caller can add.
type Remedy int

const (
	// NoRemedy: the refusal is about the workload, not the call.
	NoRemedy Remedy = iota
	// RemedyReplicas: give the replica count to start with.
	RemedyReplicas
	// RemedyAdjustHPA: ask to widen the HPA's bounds to the new count.
	RemedyAdjustHPA
)

// Invalid is an argument lifecycle cannot act on (the workload API answers
// 422 with it).
type Invalid struct{ Field, Reason string }

func (e *Invalid) Error() string { return e.Field + ": " + e.Reason }
