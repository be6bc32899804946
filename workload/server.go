// Package workload is capscale's workload lifecycle API: restart, rollout
// status, stop, start, scale with a capacity computation, and a thin way to
// write and read ElasticWeb resources. Every /v1 request acts as its caller: its reads of the workload and
// all its writes go to the apiserver with the caller's own bearer token
// (package caller), so the apiserver's authentication, RBAC, admission and
// audit decide. Only the capacity computation reads the API's own informers
// (nodes, pods, and the workload's pod template).
package workload

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/clock"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/workload/capacity"
	"github.com/capscale/capscale/workload/lifecycle"
)

// DefaultMaxBodyBytes bounds request bodies unless configured otherwise.
const DefaultMaxBodyBytes = 1 << 20

// DefaultMaxInflight bounds concurrent /v1 requests unless configured
// otherwise.
const DefaultMaxInflight = 64

// Config wires a Server.
type Config struct {
	// ClientFor returns the client a request acts with, authenticated by
	// the caller's bearer token (caller.Clients.For).
	ClientFor func(token string) (kubernetes.Interface, error)
	// DynamicFor returns the dynamic client (ElasticWebs) a request acts
	// with, authenticated by the caller's bearer token
	// (caller.Clients.DynamicFor). Without it the elastic web routes answer
	// 500.
	DynamicFor func(token string) (dynamic.Interface, error)
	// MaxInflight bounds the /v1 requests served at once; more get 429.
	// Default DefaultMaxInflight.
	MaxInflight int
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
	// DefaultUnderlayIPCapacity is a node's underlay IP capacity without the
	// annotation.
	DefaultUnderlayIPCapacity int64
	// AwaitCapacitySource: capacity sources are configured; a node the
	// mirror has not read counts 0 underlay IPs (underlay.Rule.AwaitSource).
	AwaitCapacitySource bool
	// MaxBodyBytes bounds request bodies; default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Clock stamps restarts; default the real clock.
	Clock clock.PassiveClock
	// Connected, if not nil, reports whether the informers' watches follow
	// the apiserver (kube.WatchHealth.Check); /readyz fails while not.
	Connected func() error
}

// Server serves the workload API.
type Server struct {
	clientFor  func(token string) (kubernetes.Interface, error)
	dynamicFor func(token string) (dynamic.Interface, error)
	connected  func() error
	metrics    metricsclient.Interface
	// inflight holds one token per /v1 request being served.
	inflight  chan struct{}
	maxBody   int64
	defaultIP int64
	awaitIP   bool

	nodes        corelisters.NodeLister
	pods         corelisters.PodLister
	deployments  appslisters.DeploymentLister
	statefulsets appslisters.StatefulSetLister
	synced       []cache.InformerSynced

	gatherer  prometheus.Gatherer
	instr     *httpserver.Instrumenter
	mutations *prometheus.CounterVec

	// stamps keeps restart stamps strictly increasing even when the clock
	// does not move between two calls.
	stamps *lifecycle.Stamper

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
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = DefaultMaxInflight
	}
	if cfg.DefaultUnderlayIPCapacity <= 0 {
		cfg.DefaultUnderlayIPCapacity = capacity.DefaultUnderlayIPCapacity
	}
	f := cfg.Informers
	s := &Server{
		clientFor:  cfg.ClientFor,
		dynamicFor: cfg.DynamicFor,
		connected:  cfg.Connected,
		metrics:    cfg.Metrics,
		inflight:   make(chan struct{}, cfg.MaxInflight),
		stamps:     &lifecycle.Stamper{Clock: cfg.Clock},
		maxBody:    cfg.MaxBodyBytes,
		defaultIP:  cfg.DefaultUnderlayIPCapacity,
		awaitIP:    cfg.AwaitCapacitySource,
		gatherer:   cfg.Gatherer,
		instr:      httpserver.NewInstrumenter("workload", cfg.Registry),
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
	// Only what the capacity computation reads: the API's ServiceAccount
	// needs get, list and watch on these and nothing else.
	nodes, pods := f.Core().V1().Nodes(), f.Core().V1().Pods()
	deps, sts := f.Apps().V1().Deployments(), f.Apps().V1().StatefulSets()
	for _, i := range []lister{nodes, pods, deps, sts} {
		add(i)
	}
	s.nodes, s.pods = nodes.Lister(), pods.Lister()
	s.deployments, s.statefulsets = deps.Lister(), sts.Lister()
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

// route describes one /v1 endpoint.
type route struct {
	method, pattern string
	// kinds the route serves; nil for an elastic web route.
	kinds []lifecycle.Kind
	// action names a mutation for the audit log and metrics; empty for
	// reads.
	action string
	h      handler
}

// handler serves one /v1 endpoint. Its target and the caller's clients are
// its arguments: endpoint resolves both before it runs.
type handler func(w http.ResponseWriter, r *http.Request, t target, c caller)

// caller is who a /v1 request acts as: clients that carry the caller's own
// bearer token, so that the apiserver's RBAC, admission and audit decide.
type caller struct {
	client kubernetes.Interface
	// dynamic is nil without Config.DynamicFor.
	dynamic dynamic.Interface
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
		{http.MethodPost, w + "/restart", lifecycle.Restartable, "restart", s.restart},
		{http.MethodGet, w + "/rollout", lifecycle.Restartable, "", s.rollout},
		{http.MethodPost, w + "/stop", lifecycle.Scalable, "stop", s.stop},
		{http.MethodPost, w + "/start", lifecycle.Scalable, "start", s.start},
		{http.MethodPut, w + "/scale", lifecycle.Scalable, "scale", s.scale},
		{http.MethodGet, w + "/capacity", lifecycle.Scalable, "", s.capacity},
		{http.MethodPut, ew, nil, "elasticweb-apply", s.applyElasticWeb},
		{http.MethodGet, ew, nil, "", s.getElasticWeb},
	} {
		r.Method(rt.method, rt.pattern, s.instr.Wrap(rt.pattern, s.endpoint(rt)))
	}
	return r
}

// endpoint is the one way through every /v1 route, in this order: the
// target from the path (404 for a resource the route does not serve), a
// logger naming route and target, the body limit, the in-flight limit
// (429), the audit line for mutations (which sees 401s too), the caller's
// clients (401 without a bearer token), then the handler.
func (s *Server) endpoint(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := parseTarget(r, rt.kinds)
		if err != nil {
			httpserver.WriteError(w, http.StatusNotFound, err.Error())
			return
		}
		logger := klog.FromContext(r.Context()).WithValues("route", rt.pattern,
			"resource", t.resource(), "namespace", t.Namespace, "name", t.Name)
		r = r.WithContext(klog.NewContext(r.Context(), logger))
		r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		select {
		case s.inflight <- struct{}{}:
			defer func() { <-s.inflight }()
		default:
			// Every request costs apiserver calls made with its token,
			// valid or not: a flood must not queue without bound.
			w.Header().Set("Retry-After", "1")
			httpserver.WriteError(w, http.StatusTooManyRequests, "too many requests in flight; retry later")
			return
		}
		if rt.action != "" {
			sw := httpserver.NewStatusRecorder(w)
			defer s.audit(rt.action, t, sw, r)
			w = sw
		}
		c, ok := s.callerOf(w, r)
		if !ok {
			return
		}
		rt.h(w, r, t, c)
	})
}

// callerOf answers 401 without a bearer token, and otherwise returns
// clients that carry the token to the apiserver, which decides. The token
// is in those clients only, and goes with the request.
func (s *Server) callerOf(w http.ResponseWriter, r *http.Request) (caller, bool) {
	token, ok := bearerToken(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="capscale"`)
		httpserver.WriteError(w, http.StatusUnauthorized, "a bearer token is required: Authorization: Bearer TOKEN")
		return caller{}, false
	}
	c, err := s.clientFor(token)
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Creating the caller's client failed")
		httpserver.WriteError(w, http.StatusInternalServerError, "cannot reach the apiserver as the caller")
		return caller{}, false
	}
	out := caller{client: c}
	if s.dynamicFor != nil {
		if out.dynamic, err = s.dynamicFor(token); err != nil {
			klog.FromContext(r.Context()).Error(err, "Creating the caller's dynamic client failed")
			httpserver.WriteError(w, http.StatusInternalServerError, "cannot reach the apiserver as the caller")
			return caller{}, false
		}
	}
	return out, true
}

func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.HasSynced() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("informers not synced"))
		return
	}
	if s.connected != nil {
		if err := s.connected(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(err.Error()))
			return
		}
	}
	_, _ = w.Write([]byte("ok"))
}

// audit logs one line per mutation attempt, whatever its outcome, and counts
// it. Who the caller is, the apiserver's audit log says: the API never learns
// it, and the bearer token is never part of this line.
func (s *Server) audit(action string, t target, sw *httpserver.StatusRecorder, r *http.Request) {
	klog.InfoS("Audit",
		"verb", action,
		"resource", t.resource(),
		"namespace", t.Namespace,
		"name", t.Name,
		"code", sw.Code(),
		"remote", r.RemoteAddr)
	s.mutations.WithLabelValues(action, strconv.Itoa(sw.Code())).Inc()
}
