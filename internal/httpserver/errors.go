package httpserver

import (
	"encoding/json"
	"net/http"
	"strconv"

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

// WriteJSON encodes v (and a newline, as json.Encoder would) with the given
// status; a value that does not encode is a logged 500.
//
// The body goes out with its Content-Length: a client that decodes one value
// and closes without reading on (kube-scheduler's extender client does)
// keeps its connection only if the read that takes the last byte also sees
// the end, which a chunked body does not give it.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		klog.ErrorS(err, "Encoding JSON response failed")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("encoding the response failed\n"))
		return
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	if _, err := w.Write(b); err != nil {
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
