package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/workload/lifecycle"
)

// errBodyTooLarge is returned by decodeJSON for an oversized body.
var errBodyTooLarge = errors.New("request body too large")

// errEmptyBody is returned by decodeJSON for a body with no JSON value.
var errEmptyBody = errors.New("request body is required")

// decodeJSON decodes exactly one JSON value from body into v, refusing
// unknown fields and trailing data. A body that is empty or only whitespace
// is errEmptyBody.
func decodeJSON(body io.Reader, v any) error {
	// Peek for emptiness without losing data.
	var buf bytes.Buffer
	dec := json.NewDecoder(io.TeeReader(body, &buf))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return errBodyTooLarge
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(buf.Bytes())) == 0:
			return errEmptyBody
		}
		return fmt.Errorf("decoding request body: %w", err)
	}
	// Anything but whitespace after the value is an error, be it a second
	// value or garbage.
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errBodyTooLarge
		}
		return fmt.Errorf("decoding request body: data after the JSON value: %w", err)
	default:
		return errors.New("decoding request body: it must hold a single JSON value")
	}
}

// decodeBody decodes the request body into v and writes the error response
// itself when it fails. optional allows an empty body.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			httpserver.WriteError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q is not supported; send application/json", ct))
			return false
		}
	}
	err := decodeJSON(r.Body, v)
	switch {
	case err == nil:
		return true
	case errors.Is(err, errEmptyBody) && optional:
		return true
	case errors.Is(err, errBodyTooLarge):
		httpserver.WriteError(w, http.StatusRequestEntityTooLarge, "request body too large")
	default:
		httpserver.WriteError(w, http.StatusBadRequest, err.Error())
	}
	return false
}

// writeError answers for a failed lifecycle call: a *lifecycle.Refusal is
// 409 and a *lifecycle.Invalid 422, each with its own words; the
// apiserver's 4xx answers reach the caller with the same code and the
// apiserver's message (err says what was being done): the call was made
// with the caller's own token, so a 401 or 403 is theirs (RBAC or an
// admission policy), not capscale's.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var refusal *lifecycle.Refusal
	var invalid *lifecycle.Invalid
	switch {
	case errors.As(err, &refusal):
		httpserver.WriteError(w, http.StatusConflict, refusal.Reason+remedy[refusal.Remedy])
		return
	case errors.As(err, &invalid):
		httpserver.WriteError(w, http.StatusUnprocessableEntity, invalid.Error())
		return
	}
	msg := err.Error()
	code := http.StatusInternalServerError
	var st apierrors.APIStatus
	switch {
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err):
		code = http.StatusServiceUnavailable
	case errors.As(err, &st) && st.Status().Code >= 400 && st.Status().Code < 500:
		code = int(st.Status().Code)
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="capscale", error="invalid_token"`)
	}
	if code >= 500 {
		klog.FromContext(r.Context()).Error(err, "API call failed")
	}
	httpserver.WriteError(w, code, msg)
}

// remedy says in the API's words what a refused caller can add.
var remedy = map[lifecycle.Remedy]string{
	lifecycle.RemedyReplicas:  `; start with {"replicas": N}`,
	lifecycle.RemedyAdjustHPA: `; ask with ?adjustHPA=true (or "adjustHPA": true) to move the HPA's bounds to include the new count`,
}
