// Package workload is capscale's workload lifecycle API: restart, rollout
// status, stop, start, scale with a capacity computation, and "elastic web"
// apply. Every /v1 request is authenticated and authorized as its caller
// (package auth); reads come from informer listers, writes go to the API
// server with optimistic concurrency.
package workload

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/clock"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/workload/auth"
	"github.com/capscale/capscale/workload/capacity"
)

// DefaultMaxBodyBytes bounds request bodies unless configured otherwise.
const DefaultMaxBodyBytes = 1 << 20

// Config wires a Server.
type Config struct {
	// Client performs the reviews and the writes.
	Client kubernetes.Interface
	// Metrics, if not nil, is asked for live node usage by the capacity
	// endpoint; a cluster without metrics.k8s.io still gets an answer.
	Metrics metricsclient.Interface
	// Informers provides the listers; New registers the informers it needs
	// and the caller starts the factory.
	Informers informers.SharedInformerFactory
	// Registry receives capscale_workload_* metrics; Gatherer serves
	// /metrics and defaults to Registry when that can gather. Both nil means
	// a new registry.
	Registry prometheus.Registerer
	Gatherer prometheus.Gatherer
	// AuthCacheTTL is how long review results are reused.
	AuthCacheTTL time.Duration
	// DefaultUnderlayIPCapacity is a node's underlay IP capacity without the
	// annotation.
	DefaultUnderlayIPCapacity int64
	// MaxBodyBytes bounds request bodies; default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Clock stamps restarts; default the real clock.
	Clock clock.PassiveClock
}

// Server serves the workload API.
type Server struct {
	client    kubernetes.Interface
	metrics   metricsclient.Interface
	reviewer  *auth.Reviewer
	clock     clock.PassiveClock
	maxBody   int64
	defaultIP int64

	nodes        corelisters.NodeLister
	pods         corelisters.PodLister
	services     corelisters.ServiceLister
	deployments  appslisters.DeploymentLister
	statefulsets appslisters.StatefulSetLister
	daemonsets   appslisters.DaemonSetLister
	hpas         autoscalinglisters.HorizontalPodAutoscalerLister
	synced       []cache.InformerSynced

	gatherer  prometheus.Gatherer
	instr     *httpserver.Instrumenter
	mutations *prometheus.CounterVec

	// restartMu guards lastRestart, which keeps restart stamps strictly
	// increasing even when the clock does not move between two calls.
	restartMu   sync.Mutex
	lastRestart time.Time

	router chi.Router
}

// New builds a Server and registers its informers on cfg.Informers.
func New(cfg Config) *Server {
	if cfg.Registry == nil {
		reg := prometheus.NewRegistry()
		cfg.Registry, cfg.Gatherer = reg, reg
	}
	if cfg.Gatherer == nil {
		if g, ok := cfg.Registry.(prometheus.Gatherer); ok {
			cfg.Gatherer = g
		} else {
			cfg.Gatherer = prometheus.DefaultGatherer
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.DefaultUnderlayIPCapacity <= 0 {
		cfg.DefaultUnderlayIPCapacity = capacity.DefaultUnderlayIPCapacity
	}
	f := cfg.Informers
	s := &Server{
		client:    cfg.Client,
		metrics:   cfg.Metrics,
		reviewer:  auth.NewReviewer(cfg.Client, auth.Options{TTL: cfg.AuthCacheTTL}, cfg.Registry),
		clock:     cfg.Clock,
		maxBody:   cfg.MaxBodyBytes,
		defaultIP: cfg.DefaultUnderlayIPCapacity,
		gatherer:  cfg.Gatherer,
		instr:     httpserver.NewInstrumenter("workload", cfg.Registry),
		mutations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "capscale", Subsystem: "workload", Name: "mutations_total",
			Help: "Mutating workload API requests, by action (restart, stop, start, scale, elasticweb-apply) and result (HTTP status code).",
		}, []string{"action", "result"}),
	}
	cfg.Registry.MustRegister(s.mutations)

	type lister interface {
		Informer() cache.SharedIndexInformer
	}
	add := func(i lister) { s.synced = append(s.synced, i.Informer().HasSynced) }
	nodes, pods, svcs := f.Core().V1().Nodes(), f.Core().V1().Pods(), f.Core().V1().Services()
	deps, sts, dss := f.Apps().V1().Deployments(), f.Apps().V1().StatefulSets(), f.Apps().V1().DaemonSets()
	hpas := f.Autoscaling().V2().HorizontalPodAutoscalers()
	for _, i := range []lister{nodes, pods, svcs, deps, sts, dss, hpas} {
		add(i)
	}
	s.nodes, s.pods, s.services = nodes.Lister(), pods.Lister(), svcs.Lister()
	s.deployments, s.statefulsets, s.daemonsets = deps.Lister(), sts.Lister(), dss.Lister()
	s.hpas = hpas.Lister()
	s.router = s.routes()
	return s
}

// Handler is the API's HTTP handler.
func (s *Server) Handler() http.Handler { return s.router }

// HasSynced reports whether every informer has synced; /readyz follows it.
func (s *Server) HasSynced() bool {
	for _, f := range s.synced {
		if !f() {
			return false
		}
	}
	return true
}

// attrsFunc says which access checks a request needs.
type attrsFunc func(*http.Request) []auth.Attributes

// route describes one /v1 endpoint.
type route struct {
	method, pattern string
	// kinds the route serves; nil for an elastic web route.
	kinds []kind
	// action names a mutation for the audit log and metrics; empty for
	// reads.
	action string
	attrs  attrsFunc
	h      http.HandlerFunc
}

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		httpserver.WriteError(w, http.StatusNotFound, "no such endpoint; see /openapi.json")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		httpserver.WriteError(w, http.StatusMethodNotAllowed, "method not allowed on this endpoint; see /openapi.json")
	})
	r.Method(http.MethodGet, "/healthz", s.instr.Wrap("/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})))
	r.Method(http.MethodGet, "/readyz", s.instr.Wrap("/readyz", http.HandlerFunc(s.readyz)))
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	r.Method(http.MethodGet, "/openapi.json", s.instr.Wrap("/openapi.json", http.HandlerFunc(serveOpenAPI)))

	const w = "/v1/namespaces/{namespace}/{resource}/{name}"
	const ew = "/v1/namespaces/{namespace}/elasticwebs/{name}"
	for _, rt := range []route{
		{http.MethodPost, w + "/restart", restartable, "restart", workloadAttrs("patch", ""), s.restart},
		{http.MethodGet, w + "/rollout", restartable, "", workloadAttrs("get", ""), s.rollout},
		{http.MethodPost, w + "/stop", scalable, "stop", workloadAttrs("update", "scale"), s.stop},
		{http.MethodPost, w + "/start", scalable, "start", workloadAttrs("update", "scale"), s.start},
		{http.MethodPut, w + "/scale", scalable, "scale", workloadAttrs("update", "scale"), s.scale},
		{http.MethodGet, w + "/capacity", scalable, "", workloadAttrs("get", ""), s.capacity},
		{http.MethodPut, ew, nil, "elasticweb-apply", elasticWebAttrs("create", "patch"), s.applyElasticWeb},
		{http.MethodGet, ew, nil, "", elasticWebAttrs("get"), s.getElasticWeb},
	} {
		var h http.Handler = rt.h
		h = s.reviewer.Require(rt.attrs)(h)
		h = s.reviewer.Authenticated(setAuditUser)(h)
		if rt.action != "" {
			// Outside authentication, so that refused attempts are audited too.
			h = s.audit(rt.action)(h)
		}
		h = s.limitBody(h)
		h = withTarget(rt.kinds, h)
		h = withRouteLogger(rt.pattern, h)
		r.Method(rt.method, rt.pattern, s.instr.Wrap(rt.pattern, h))
	}
	return r
}

// workloadAttrs checks verb on the target's resource (in group apps), with
// an optional subresource, for the named object.
func workloadAttrs(verb, subresource string) attrsFunc {
	return func(r *http.Request) []auth.Attributes {
		t := targetOf(r)
		return []auth.Attributes{{
			Verb: verb, Group: "apps", Resource: t.resource(), Subresource: subresource,
			Namespace: t.namespace, Name: t.name,
		}}
	}
}

// elasticWebAttrs checks every verb on each object an elastic web consists
// of: the caller must be allowed to do by hand what the API does for them.
func elasticWebAttrs(verbs ...string) attrsFunc {
	objs := []struct{ group, resource string }{
		{"apps", "deployments"}, {"", "services"}, {"autoscaling", "horizontalpodautoscalers"},
	}
	return func(r *http.Request) []auth.Attributes {
		t := targetOf(r)
		var out []auth.Attributes
		for _, o := range objs {
			for _, v := range verbs {
				out = append(out, auth.Attributes{Verb: v, Group: o.group, Resource: o.resource, Namespace: t.namespace, Name: t.name})
			}
		}
		return out
	}
}

// clientFor is the client a request acts with.
func (s *Server) clientFor(*http.Request) kubernetes.Interface { return s.client }

// withRouteLogger gives handlers a contextual logger that names the route.
func withRouteLogger(pattern string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context()).WithValues("route", pattern)
		next.ServeHTTP(w, r.WithContext(klog.NewContext(r.Context(), logger)))
	})
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.HasSynced() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("informers not synced"))
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// limitBody caps every request body so that no handler can be made to read
// an unbounded amount; decodeBody turns the overflow into a 413.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		next.ServeHTTP(w, r)
	})
}

type auditInfoKey struct{}

// auditInfo is filled in by the authentication middleware, which runs
// inside the audit middleware and so cannot hand it back through the
// request context.
type auditInfo struct{ user string }

func setAuditUser(r *http.Request, u *auth.User) {
	if ai, ok := r.Context().Value(auditInfoKey{}).(*auditInfo); ok {
		ai.user = u.Name
	}
}

// audit logs one line per mutation attempt, whatever its outcome, and counts
// it. The bearer token is never part of it.
func (s *Server) audit(action string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ai := &auditInfo{}
			ctx := context.WithValue(r.Context(), auditInfoKey{}, ai)
			sw := httpserver.NewStatusRecorder(w)
			next.ServeHTTP(sw, r.WithContext(ctx))
			t := targetOf(r)
			klog.InfoS("Audit",
				"user", ai.user,
				"verb", action,
				"resource", t.resource(),
				"namespace", t.namespace,
				"name", t.name,
				"code", sw.Code(),
				"remote", r.RemoteAddr)
			s.mutations.WithLabelValues(action, strconv.Itoa(sw.Code())).Inc()
		})
	}
}
