package extender

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the extender's own series; request counts and latencies come
// from internal/httpserver's Instrumenter. Labels are low-cardinality causes,
// never node or pod names.
type Metrics struct {
	// FilteredNodes counts nodes filter rejected, by cause (exhausted,
	// capacity_too_small, invalid_capacity, unknown_node).
	FilteredNodes *prometheus.CounterVec
	// BindConflicts counts binds refused because the node filled up between
	// filter and bind (no_room), the pod was bound elsewhere
	// (bound_elsewhere) or a bind of it to another node is not settled yet
	// (in_flight).
	BindConflicts *prometheus.CounterVec
	// Binds counts bind outcomes (bound, already_bound, no_room,
	// not_binder, not_sent, error).
	Binds *prometheus.CounterVec
	// InvalidCapacityAnnotations counts every invalid capacity annotation
	// value seen on a node add or change.
	InvalidCapacityAnnotations prometheus.Counter
	// ExpiredReservations counts reservations dropped because a bind's
	// outcome stayed unknown past the reservation TTL.
	ExpiredReservations prometheus.Counter
	// ReconciledReservations counts the reservations (confirmed, or with
	// an unknown outcome) the informer left unsettled and a read of the
	// pod decided, by result: dropped (gone, recreated, terminal,
	// not_on_node) or kept (bound, pending, error).
	ReconciledReservations *prometheus.CounterVec
	// FreedIPReuse is the time from IPs freed in the ledger to a pod that
	// was waiting for them bound.
	FreedIPReuse prometheus.Histogram
	// RequeueWrites counts the requeuer's pod updates by result (requeued,
	// skipped, gone: deleted or re-created under the same name, error).
	RequeueWrites *prometheus.CounterVec
}

// NewMetrics creates the extender metrics and registers them on reg when reg
// is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "capscale", "extender"
	m := &Metrics{
		FilteredNodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "filtered_nodes_total",
			Help: "Nodes filtered out for a pod that needs underlay IPs, by cause.",
		}, []string{"cause"}),
		BindConflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "bind_conflicts_total",
			Help: "Binds refused at the re-check: the node filled up after filter (no_room), the pod was bound to another node (bound_elsewhere), or a bind of it to another node is not settled (in_flight).",
		}, []string{"reason"}),
		Binds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "binds_total",
			Help: "Bind requests by result (bound, already_bound, no_room, not_binder: another binder ID holds the binder lease, not_sent: the client-side rate limit did not admit the Binding before the lease's validity or kube-scheduler's deadline, error).",
		}, []string{"result"}),
		InvalidCapacityAnnotations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "invalid_capacity_annotations_total",
			Help: "Invalid underlay IP capacity annotation values seen on node adds and changes.",
		}),
		ExpiredReservations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "expired_reservations_total",
			Help: "Reservations dropped after a bind with an unknown outcome was never confirmed.",
		}),
		ReconciledReservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "reservations_reconciled_total",
			Help: "Reservations of successful binds, or of binds with an unknown outcome, whose pod the informer did not show bound in time, checked with a read of the pod, by result: dropped (gone, recreated, terminal, not_on_node) or kept (bound, pending, error).",
		}, []string{"result"}),
		FreedIPReuse: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "freed_ip_reuse_seconds",
			Help:    "Time from underlay IPs freed in the ledger to a pod that waited for IPs bound.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300},
		}),
		RequeueWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "requeue_writes_total",
			Help: "Pod status updates that ask kube-scheduler to retry a pod after underlay IPs were freed, by result (requeued, skipped, gone, error).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.FilteredNodes, m.BindConflicts, m.Binds, m.InvalidCapacityAnnotations,
			m.ExpiredReservations, m.ReconciledReservations, m.FreedIPReuse, m.RequeueWrites)
	}
	return m
}

// RegisterLedger registers the gauges of l's cluster totals on reg. They
// are read from the ledger when scraped, so the ledger keeps no metrics.
func RegisterLedger(reg prometheus.Registerer, l *Ledger) {
	const ns, sub = "capscale", "extender"
	totals := func(f func(t Totals, invalid int) int64) func() float64 {
		return func() float64 { return float64(f(l.Totals())) }
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "nodes",
			Help: "Nodes known to the extender."},
			totals(func(t Totals, _ int) int64 { return int64(t.Nodes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "capacity_ips",
			Help: "Underlay IP capacity summed over known nodes."},
			totals(func(t Totals, _ int) int64 { return t.Capacity })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "used_ips",
			Help: "Underlay IPs held by bound, non-terminal pods."},
			totals(func(t Totals, _ int) int64 { return t.Used })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "reserved_ips",
			Help: "Underlay IPs reserved by binds not yet seen by the pod informer."},
			totals(func(t Totals, _ int) int64 { return t.Reserved })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "invalid_capacity_annotation_nodes",
			Help: "Nodes whose underlay IP capacity annotation is invalid (capacity treated as 0)."},
			totals(func(_ Totals, invalid int) int64 { return int64(invalid) })),
	)
}

// RegisterWaiting registers the size of w (nil: an empty set) on reg. It is
// read when scraped: a gauge the requeuer set on its own ticks trailed the
// set by up to five seconds, and the soak caught it above the Pending pods.
func RegisterWaiting(reg prometheus.Registerer, w *Waiting) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "capscale", Subsystem: "extender", Name: "waiting_pods",
		Help: "Pods rejected for lack of underlay IPs that wait for IPs to be freed.",
	}, func() float64 { return float64(w.Len()) }))
}
