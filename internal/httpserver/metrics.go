package httpserver

import (
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Instrumenter records capscale_<component>_http_requests_total and
// capscale_<component>_http_request_duration_seconds per route and code.
type Instrumenter struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewInstrumenter registers the request metrics of component on reg.
func NewInstrumenter(component string, reg prometheus.Registerer) *Instrumenter {
	i := &Instrumenter{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "capscale", Subsystem: component, Name: "http_requests_total",
			Help: "HTTP requests served, by route and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "capscale", Subsystem: component, Name: "http_request_duration_seconds",
			Help:    "Latency of HTTP requests, by route and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "code"}),
	}
	reg.MustRegister(i.requests, i.duration)
	return i
}

// ConnCounter registers capscale_<component>_http_connections_total on reg
// and returns the ConnState hook that counts each connection opened. Per
// request served, it says how often clients open new connections, which
// costs the server an accept, a goroutine and its buffers each time.
func ConnCounter(component string, reg prometheus.Registerer) func(net.Conn, http.ConnState) {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "capscale", Subsystem: component, Name: "http_connections_total",
		Help: "TCP connections accepted by the API server.",
	})
	reg.MustRegister(c)
	return func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.Inc()
		}
	}
}

// Wrap instruments h under a fixed route label; the label is never taken from
// the URL so that its cardinality stays bounded.
func (i *Instrumenter) Wrap(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := NewStatusRecorder(w)
		h.ServeHTTP(sw, r)
		code := strconv.Itoa(sw.Code())
		i.requests.WithLabelValues(route, code).Inc()
		i.duration.WithLabelValues(route, code).Observe(time.Since(start).Seconds())
	})
}

// StatusRecorder is a ResponseWriter that remembers the status code written
// (200 when the handler never calls WriteHeader).
type StatusRecorder struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

// NewStatusRecorder wraps w.
func NewStatusRecorder(w http.ResponseWriter) *StatusRecorder {
	return &StatusRecorder{ResponseWriter: w, code: http.StatusOK}
}

// Code is the status code written so far.
func (s *StatusRecorder) Code() int { return s.code }

// WriteHeader records the first code and passes it on.
func (s *StatusRecorder) WriteHeader(code int) {
	if !s.wroteHeader {
		s.code, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *StatusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
