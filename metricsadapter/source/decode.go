// Package source polls third-party HTTP endpoints for load indexes. Each
// configured source has a background poller; readers get the last good
// sample from memory together with its sample time, and never wait on the
// network.
package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"

	"k8s.io/client-go/util/jsonpath"
)

// MaxBodyBytes is the largest response body a source may return.
const MaxBodyBytes = 1 << 20

// Reason is why a poll failed. The set is fixed so that
// capscale_adapter_source_errors_total stays low-cardinality.
type Reason string

// The reasons a poll can fail.
const (
	ReasonTimeout      Reason = "timeout"
	ReasonConnection   Reason = "connection"
	ReasonTLS          Reason = "tls"
	ReasonHTTPStatus   Reason = "http_status"
	ReasonBodyTooLarge Reason = "body_too_large"
	ReasonInvalidJSON  Reason = "invalid_json"
	ReasonMissingPath  Reason = "missing_path"
	ReasonNotANumber   Reason = "not_a_number"
	ReasonInvalidValue Reason = "invalid_value"
	ReasonCredentials  Reason = "credentials"
)

// Reasons lists every Reason, for pre-creating counters.
var Reasons = []Reason{
	ReasonTimeout, ReasonConnection, ReasonTLS, ReasonHTTPStatus, ReasonBodyTooLarge,
	ReasonInvalidJSON, ReasonMissingPath, ReasonNotANumber, ReasonInvalidValue, ReasonCredentials,
}

// PollError is a failed poll with its Reason.
type PollError struct {
	Reason Reason
	Err    error
}

// Error renders "reason: cause".
func (e *PollError) Error() string { return string(e.Reason) + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *PollError) Unwrap() error { return e.Err }

func pollErr(r Reason, format string, args ...any) *PollError {
	return &PollError{Reason: r, Err: fmt.Errorf(format, args...)}
}

// DecodeValue extracts the load index from a response body: the body must be
// one JSON document and path must select exactly one JSON number that is
// finite and not negative.
func DecodeValue(body []byte, path *jsonpath.JSONPath) (float64, error) {
	if len(body) > MaxBodyBytes {
		return 0, pollErr(ReasonBodyTooLarge, "body is larger than %d bytes", MaxBodyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	// json.Number keeps "1e400" distinguishable from a real +Inf.
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return 0, pollErr(ReasonInvalidJSON, "decoding body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return 0, pollErr(ReasonInvalidJSON, "unexpected data after the JSON document")
	}

	results, err := path.FindResults(doc)
	if err != nil {
		return 0, pollErr(ReasonMissingPath, "evaluating jsonPath: %w", err)
	}
	var found []reflect.Value
	for _, r := range results {
		found = append(found, r...)
	}
	switch len(found) {
	case 0:
		return 0, pollErr(ReasonMissingPath, "jsonPath matched nothing")
	case 1:
	default:
		return 0, pollErr(ReasonNotANumber, "jsonPath matched %d values, want a single number", len(found))
	}

	v := found[0]
	for v.Kind() == reflect.Interface && !v.IsNil() {
		v = v.Elem()
	}
	if !v.IsValid() || (v.Kind() == reflect.Interface && v.IsNil()) {
		return 0, pollErr(ReasonNotANumber, "value is null")
	}
	var f float64
	switch x := v.Interface().(type) {
	case json.Number:
		f, err = strconv.ParseFloat(string(x), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, pollErr(ReasonNotANumber, "parsing %q: %w", string(x), err)
		}
	case float64:
		f = x
	default:
		return 0, pollErr(ReasonNotANumber, "value is a %s, not a number", jsonKind(x))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, pollErr(ReasonInvalidValue, "value %v is not a finite number >= 0", f)
	}
	return f, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// ParsePath compiles a jsonPath the way pollers use it: a missing key is an
// error, not an empty result.
func ParsePath(name, expr string) (*jsonpath.JSONPath, error) {
	jp := jsonpath.New(name)
	if err := jp.Parse(expr); err != nil {
		return nil, fmt.Errorf("parsing jsonPath %q: %w", expr, err)
	}
	jp.AllowMissingKeys(false)
	return jp, nil
}
