package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/underlay"
)

// DefaultMaxRequestBytes bounds a request body. A full ExtenderArgs of 5000
// realistic Nodes (images and status, ~17 KiB each) is ~85 MiB.
const DefaultMaxRequestBytes int64 = 100 << 20

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	// Ledger answers filter, prioritize, preempt and /capacity.
	Ledger *extender.Ledger
	// Binder answers bind.
	Binder *extender.Binder
	// Waiting, if not nil, learns from filter which pods wait for IPs to
	// be freed (the requeuer's list).
	Waiting *extender.Waiting
	// CapacityMoves: the extender reads the capacity sources itself, so a
	// node's capacity grows with no Node event, and kube-scheduler retries
	// no pod an extender turned away until some event comes. A pod turned
	// away for a capacity too small or not valid yet then waits in Waiting
	// too, as for freed IPs, and the capacity's growth requeues it.
	CapacityMoves bool
	// Metrics receive what the verbs decide; nil: unregistered ones.
	Metrics *extender.Metrics
	// Ready reports whether the ledger has been rebuilt from the informers
	// and still follows them; while not, the verbs answer 503 and /readyz
	// fails. Nil means ready.
	Ready func() bool
	// MaxRequestBytes bounds request bodies; 0 means DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// Registerer receives the request metrics; Gatherer serves /metrics.
	// Without both, a private registry is used.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
}

type server struct {
	verbs
	binder   *extender.Binder
	ready    func() bool
	maxBytes int64
}

// NewHandler returns the extender's HTTP API: POST /filter, /prioritize,
// /bind, /preempt; GET /capacity, /healthz, /readyz, /metrics.
func NewHandler(o HandlerOptions) http.Handler {
	if o.Metrics == nil {
		o.Metrics = extender.NewMetrics(nil)
	}
	s := &server{verbs: verbs{ledger: o.Ledger, waiting: o.Waiting, metrics: o.Metrics, capacityMoves: o.CapacityMoves},
		binder: o.Binder, ready: o.Ready, maxBytes: o.MaxRequestBytes}
	if s.ready == nil {
		s.ready = func() bool { return true }
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxRequestBytes
	}
	if o.Registerer == nil || o.Gatherer == nil {
		reg := prometheus.NewRegistry()
		o.Registerer, o.Gatherer = reg, reg
	}
	inst := httpserver.NewInstrumenter("extender", o.Registerer)

	r := chi.NewRouter()
	r.Use(recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		httpserver.WriteError(w, http.StatusNotFound, fmt.Sprintf("no route %s", r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		httpserver.WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path))
	})
	r.Method(http.MethodPost, "/filter", inst.Wrap("filter", http.HandlerFunc(s.filter)))
	r.Method(http.MethodPost, "/prioritize", inst.Wrap("prioritize", http.HandlerFunc(s.prioritize)))
	r.Method(http.MethodPost, "/bind", inst.Wrap("bind", http.HandlerFunc(s.bind)))
	r.Method(http.MethodPost, "/preempt", inst.Wrap("preempt", http.HandlerFunc(s.preempt)))
	r.Method(http.MethodGet, "/capacity", inst.Wrap("capacity", http.HandlerFunc(s.capacity)))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok") })
	r.Get("/readyz", s.readyz)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	return r
}

// recoverer turns a handler panic into a logged 500 with the JSON error body,
// so that one bad request can never take the extender down.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			rec := recover()
			if rec == nil {
				return
			}
			if rec == http.ErrAbortHandler {
				panic(rec)
			}
			klog.FromContext(r.Context()).Error(fmt.Errorf("panic: %v", rec), "Handler panicked", "method", r.Method, "path", r.URL.Path)
			httpserver.WriteError(w, http.StatusInternalServerError, "internal error")
		}()
		next.ServeHTTP(w, r)
	})
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg+"\n")
}

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready() {
		writeText(w, http.StatusServiceUnavailable, "informers or capacity sources not synced, or not connected: the underlay IP ledger does not follow the apiserver")
		return
	}
	writeText(w, http.StatusOK, "ok")
}

// readBody reads the bounded body, answering 413/400 itself when it fails,
// and 503 while the ledger is not rebuilt: an answer from a partial ledger
// could over-commit a node.
// The body is read into sc's buffer (nil sc: its own).
func (s *server) readBody(w http.ResponseWriter, r *http.Request, sc *Scratch) ([]byte, bool) {
	if !s.ready() {
		httpserver.WriteError(w, http.StatusServiceUnavailable, "the underlay IP ledger is not rebuilt from the informers and capacity sources yet")
		return nil, false
	}
	if r.ContentLength > s.maxBytes {
		httpserver.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes exceeds the limit of %d bytes", r.ContentLength, s.maxBytes))
		return nil, false
	}
	body := http.MaxBytesReader(w, r.Body, s.maxBytes)
	var (
		data []byte
		err  error
	)
	if r.ContentLength > 0 {
		// Known size: one allocation instead of repeated growth.
		data = sc.bodyBuf(r.ContentLength)
		_, err = io.ReadFull(body, data)
	} else {
		data, err = io.ReadAll(body)
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			httpserver.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds the limit of %d bytes", s.maxBytes))
			return nil, false
		}
		httpserver.WriteError(w, http.StatusBadRequest, fmt.Sprintf("reading request body: %v", err))
		return nil, false
	}
	return data, true
}

// readArgs reads and decodes an ExtenderArgs body into sc, answering the
// request itself (400, 413) when it cannot. args' Nodes point into sc's
// body: sc is released only once the response is written.
func (s *server) readArgs(w http.ResponseWriter, r *http.Request, sc *Scratch) (*Args, bool) {
	data, ok := s.readBody(w, r, sc)
	if !ok {
		return nil, false
	}
	args, err := decodeExtenderArgs(data, sc)
	if err != nil {
		httpserver.WriteError(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	return args, true
}

func (s *server) filter(w http.ResponseWriter, r *http.Request) {
	sc := getScratch()
	defer sc.Release()
	args, ok := s.readArgs(w, r, sc)
	if !ok {
		return
	}
	res := s.verbs.filter(args, sc)
	failed, unresolvable := res.failedCounts()
	logDecision(r.Context(), "Filtered nodes", args, "failed", failed, "unresolvable", unresolvable)
	if args.Nodes != nil {
		// Full Nodes: stream them (tens of megabytes) without another copy.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if _, err := res.WriteTo(w); err != nil {
			// The status is sent; the scheduler sees a truncated body.
			klog.FromContext(r.Context()).Error(err, "Writing the filter response failed")
		}
		return
	}
	writeSized(w, r, sc, "filter", res.WriteTo)
}

// writeSized writes a JSON answer built in memory with its Content-Length.
// kube-scheduler decodes one value and closes the body without reading on
// (pkg/scheduler/extender.go, send): a chunked answer leaves the closing
// chunk unread and the connection is dropped, so every call paid a new TCP
// connection on both sides. With the length known, the read that takes the
// last byte also sees the end, and the connection goes back to the pool
// (TestSchedulerClientReusesConnection).
func writeSized(w http.ResponseWriter, r *http.Request, sc *Scratch, verb string, write func(io.Writer) (int64, error)) {
	buf := sc.response()
	if _, err := write(buf); err != nil {
		klog.FromContext(r.Context()).Error(err, "Encoding the response failed", "verb", verb)
		httpserver.WriteError(w, http.StatusInternalServerError, "encoding the response failed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(buf.Bytes()); err != nil {
		klog.FromContext(r.Context()).V(2).Info("Writing the response failed", "verb", verb, "err", err)
	}
}

func (s *server) prioritize(w http.ResponseWriter, r *http.Request) {
	sc := getScratch()
	defer sc.Release()
	args, ok := s.readArgs(w, r, sc)
	if !ok {
		return
	}
	names, scores := s.verbs.prioritize(args, sc)
	logDecision(r.Context(), "Prioritized nodes", args)
	at := func(i int) (string, int64) { return names[i], scores[i] }
	writeSized(w, r, sc, "prioritize", func(w io.Writer) (int64, error) {
		return writeScores(w, sc, len(names), at, args.NodeNames != nil && args.plainNames)
	})
}

func (s *server) preempt(w http.ResponseWriter, r *http.Request) {
	data, ok := s.readBody(w, r, nil)
	if !ok {
		return
	}
	args, err := DecodePreemptionArgs(data)
	if err != nil {
		httpserver.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	res := s.verbs.preempt(args)
	klog.FromContext(r.Context()).V(4).Info("Preemption candidates", "pod", klog.KObj(args.Pod),
		"in", len(args.NodeNameToMetaVictims)+len(args.NodeNameToVictims), "kept", len(res.NodeNameToMetaVictims))
	httpserver.WriteJSON(w, http.StatusOK, res)
}

func (s *server) bind(w http.ResponseWriter, r *http.Request) {
	data, ok := s.readBody(w, r, nil)
	if !ok {
		return
	}
	args, err := DecodeBindingArgs(data)
	if err != nil {
		httpserver.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var res extenderv1.ExtenderBindingResult
	if s.binder == nil {
		res.Error = "this extender does not bind"
	} else if err := s.verbs.bind(r.Context(), s.binder, args); err != nil {
		// kube-scheduler reads the error from the result and retries the pod.
		res.Error = err.Error()
	}
	httpserver.WriteJSON(w, http.StatusOK, res)
}

func (s *server) capacity(w http.ResponseWriter, _ *http.Request) {
	if !s.ready() {
		httpserver.WriteError(w, http.StatusServiceUnavailable, "the underlay IP ledger is not rebuilt from the informers and capacity sources yet")
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, s.ledger.Report())
}

func logDecision(ctx context.Context, msg string, args *Args, kv ...any) {
	logger := klog.FromContext(ctx)
	if !logger.V(4).Enabled() {
		return
	}
	n := args.count()
	logger.V(4).Info(msg, append([]any{"pod", klog.KObj(args.Pod), "need", underlay.PodNeed(args.Pod), "nodes", n}, kv...)...)
}
