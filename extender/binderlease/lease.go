package binderlease

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Timings, as client-go's leader election: another ID takes over once the
// lease has not changed for Duration; a holder stops binding RenewDeadline
// after its last successful write, so the two never overlap and a bind in
// flight has Duration-RenewDeadline to land.
const (
	Duration      = 15 * time.Second
	RenewDeadline = 10 * time.Second
	RetryPeriod   = 2 * time.Second
)

// Lease holds the binder lease for one binder ID. Check, called before
// every bind, reads one atomic value that Run writes.
type Lease struct {
	client    kubernetes.Interface
	namespace string
	id        string
	clock     clock.Clock
	held      prometheus.Gauge

	// validUntil is the UnixNano until which this extender may bind.
	validUntil atomic.Int64
	// other is who holds the lease when it is not ours ("" if unknown).
	other atomic.Pointer[string]

	// Only Run's goroutine touches these.
	observed Observed
	refusing bool
	events   record.EventRecorder
}

// New returns the lease of binder id in namespace. client should be the
// Leases' own, with a rate limiter of its own, as kube-scheduler gives
// leader election its own clientset: behind a backlog of binds a renewal
// would wait past RenewDeadline, and every bind be refused. reg, if not
// nil, receives capscale_extender_binder_lease_held.
func New(client kubernetes.Interface, namespace, id string, reg prometheus.Registerer) (*Lease, error) {
	l := &Lease{client: client, namespace: namespace, id: id, clock: clock.RealClock{},
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "capscale", Subsystem: "extender", Name: "binder_lease_held",
			Help: "1 while this extender holds the underlay-IP binder Lease and may bind; 0 while another binder ID holds it (every bind is refused).",
		})}
	if reg != nil {
		if err := reg.Register(l.held); err != nil {
			return nil, fmt.Errorf("registering the binder lease metric: %w", err)
		}
	}
	return l, nil
}

// Check returns nil while this extender may bind, else an error for the
// pod's scheduling event that names the other binder.
func (l *Lease) Check() error {
	_, err := l.Until()
	return err
}

// Until returns the time until which this extender may send Bindings: the
// last renewal plus RenewDeadline, a lease duration's grace (Duration -
// RenewDeadline) before another binder ID may take over. It returns Check's
// error when it may not bind now.
func (l *Lease) Until() (time.Time, error) {
	if v := l.validUntil.Load(); l.clock.Now().UnixNano() < v {
		return time.Unix(0, v), nil
	}
	return time.Time{}, l.refusal()
}

// refusal is why this extender may not bind.
func (l *Lease) refusal() error {
	if p := l.other.Load(); p != nil && *p != "" {
		return fmt.Errorf("refusing to bind: another underlay-IP binder, %q, holds the Lease %s/%s, and this extender's binder ID is %q; two schedulers with capscale extenders would over-commit nodes: run one (docs/extender-mode.md \"Two ways to install\")", *p, l.namespace, Name, l.id)
	}
	return fmt.Errorf("refusing to bind: this extender (binder ID %q) has not renewed the Lease %s/%s within %s", l.id, l.namespace, Name, RenewDeadline)
}

// Run keeps the lease until ctx is done. It never releases it on exit: a
// replica of the same binder ID may still be binding.
func (l *Lease) Run(ctx context.Context) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: l.client.CoreV1().Events(l.namespace)})
	defer b.Shutdown()
	l.events = b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "capscale-extender"})
	wait.UntilWithContext(ctx, l.tick, RetryPeriod)
}

func (l *Lease) tick(ctx context.Context) {
	start := l.clock.Now()
	leases := l.client.CoordinationV1().Leases(l.namespace)
	cur, err := leases.Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cur, err = nil, nil
	}
	if err != nil {
		klog.ErrorS(err, "Reading the underlay-IP binder lease failed", "lease", klog.KRef(l.namespace, Name))
		l.publish()
		return
	}
	d := Decide(cur, l.id, l.observed, start, Duration)
	l.observed = d.Observed
	if d.Action == Wait {
		l.refuse(cur, d.Holder)
		return
	}
	want := Apply(cur, l.namespace, l.id, d, start, Duration)
	if d.Action == Create {
		_, err = leases.Create(ctx, want, metav1.CreateOptions{})
	} else {
		_, err = leases.Update(ctx, want, metav1.UpdateOptions{})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		// A replica with the same ID may have renewed it a moment ago.
		if now, gerr := leases.Get(ctx, Name, metav1.GetOptions{}); gerr == nil && now.Spec.HolderIdentity != nil && *now.Spec.HolderIdentity == l.id {
			err = nil
		}
	}
	if err != nil {
		klog.ErrorS(err, "Writing the underlay-IP binder lease failed", "lease", klog.KRef(l.namespace, Name), "action", d.Action)
		l.publish()
		return
	}
	l.validUntil.Store(start.Add(RenewDeadline).UnixNano())
	l.other.Store(nil)
	if l.refusing || d.Action != Renew {
		klog.InfoS("Holding the underlay-IP binder lease: this extender binds", "lease", klog.KRef(l.namespace, Name), "binderID", l.id)
	}
	l.refusing = false
	l.publish()
}

// refuse records that holder holds the lease: a log line and an Event on
// the Lease once per change, the gauge always.
func (l *Lease) refuse(cur *coordinationv1.Lease, holder string) {
	prev := l.other.Swap(&holder)
	l.publish()
	if l.refusing && prev != nil && *prev == holder {
		return
	}
	l.refusing = true
	msg := fmt.Sprintf("extender with binder ID %q refuses every bind: %q holds this lease. Two schedulers with capscale extenders would over-commit nodes; run one", l.id, holder)
	klog.ErrorS(nil, "Another underlay-IP binder holds the lease; refusing every bind", "lease", klog.KRef(l.namespace, Name), "holder", holder, "binderID", l.id)
	l.events.Event(cur, v1.EventTypeWarning, "UnderlayIPBinderConflict", msg)
}

func (l *Lease) publish() {
	if l.Check() == nil {
		l.held.Set(1)
	} else {
		l.held.Set(0)
	}
}
