package httpserver

import (
	"encoding/json"
	"net/http"

	"k8s.io/klog/v2"
)

// Error is the JSON body of every capscale error response.
type Error struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// WriteError writes {"code","reason","message"} with the reason derived from
// the status code (BadRequest, Forbidden, ...).
func WriteError(w http.ResponseWriter, code int, message string) {
	WriteJSON(w, code, Error{Code: code, Reason: Reason(code), Message: message})
}

// WriteJSON encodes v with the given status; an encode failure can only be
// logged because the header is already sent.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.V(2).InfoS("Writing JSON response failed", "err", err)
	}
}

// Reason names a status code the way metav1.StatusReason does.
func Reason(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "BadRequest"
	case http.StatusUnauthorized:
		return "Unauthorized"
	case http.StatusForbidden:
		return "Forbidden"
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusMethodNotAllowed:
		return "MethodNotAllowed"
	case http.StatusConflict:
		return "Conflict"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLarge"
	case http.StatusUnsupportedMediaType:
		return "UnsupportedMediaType"
	case http.StatusUnprocessableEntity:
		return "Invalid"
	case http.StatusTooManyRequests:
		return "TooManyRequests"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	case http.StatusGatewayTimeout:
		return "Timeout"
	default:
		if code >= 500 {
			return "InternalError"
		}
		return http.StatusText(code)
	}
}
