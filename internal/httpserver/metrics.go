package httpserver

import (
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

// Wrap instruments h under a fixed route label; the label is never taken from
// the URL so that its cardinality stays bounded.
func (i *Instrumenter) Wrap(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		code := strconv.Itoa(sw.code)
		i.requests.WithLabelValues(route, code).Inc()
		i.duration.WithLabelValues(route, code).Observe(time.Since(start).Seconds())
	})
}

type statusWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wroteHeader {
		s.code, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
