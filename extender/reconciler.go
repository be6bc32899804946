package extender

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// ReconcilerOptions configure NewReconciler; zero values take the defaults.
type ReconcilerOptions struct {
	// Grace is how long a confirmed reservation may wait for the informer
	// before its pod is read, and between two reads of the same pod;
	// default 5s.
	Grace time.Duration
	// Interval is the time between rounds; default 2s.
	Interval time.Duration
	// MaxGets bounds the pod reads of one round; default 10, so at most 5
	// reads a second with the default Interval: a tenth of the default
	// --kube-api-qps, which the Binding POSTs share.
	MaxGets int
	// Metrics count the results; nil: unregistered ones.
	Metrics *Metrics
	// Waiting, if not nil, learns of the room a dropped reservation frees,
	// as after a pod deletion.
	Waiting *Waiting
}

// Reconciler ends the reservations of binds that succeeded but whose pod the
// informer never showed bound, once a GET shows the pod is no longer on the
// node (see reconcile.go).
type Reconciler struct {
	ledger *Ledger
	client kubernetes.Interface
	opts   ReconcilerOptions
}

// NewReconciler returns a reconciler of l's confirmed reservations that
// reads pods with client.
func NewReconciler(l *Ledger, client kubernetes.Interface, o ReconcilerOptions) *Reconciler {
	if o.Grace <= 0 {
		o.Grace = 5 * time.Second
	}
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.MaxGets <= 0 {
		o.MaxGets = 10
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return &Reconciler{ledger: l, client: client, opts: o}
}

// Run reconciles every Interval until ctx is done.
func (r *Reconciler) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, r.Reconcile, r.opts.Interval)
}

// Reconcile runs one round: it reads the pods of at most MaxGets stale
// reservations and drops those whose pod is not holding on the node.
func (r *Reconciler) Reconcile(ctx context.Context) {
	for _, s := range r.ledger.Stale(r.opts.Grace, r.opts.MaxGets) {
		if ctx.Err() != nil {
			return
		}
		pod, err := r.client.CoreV1().Pods(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
		result, drop := reconcileVerdict(s, pod, err)
		if drop {
			dropped, room := r.ledger.DropStale(s)
			if !dropped {
				// The informer or a new bind settled it meanwhile.
				continue
			}
			r.opts.Waiting.Freed(room)
		} else {
			r.ledger.KeepStale(s)
		}
		r.opts.Metrics.ReconciledReservations.WithLabelValues(result).Inc()
		logStale(s, result, drop, err)
	}
}
