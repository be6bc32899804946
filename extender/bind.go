package extender

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Binder binds pods for kube-scheduler, re-checking the node's capacity under
// the ledger lock first.
type Binder struct {
	client kubernetes.Interface
	pods   PodLookup
	ledger *Ledger
	// Gate, if set, must return no error before any Binding is made, and
	// the time until which Bindings may be sent: the binder lease
	// (extender/binderlease) that keeps a second extender, whose ledger
	// this one cannot see, from binding at the same time. A Binding not
	// sent by then is not sent at all.
	Gate func() (time.Time, error)
	// BindClient, if set, sends the Bindings instead of client: one with no
	// rate limiter of its own, so that Throttle's wait is the only one.
	BindClient kubernetes.Interface
	// Throttle, if set, waits for the client-side rate limit before each
	// Binding. Its error means the Binding was never sent: a definite
	// failure, whose reservation is released at once. (A limiter inside
	// client-go returns the same context error for a wait cut short as for
	// a request cut short in flight, which may have landed.)
	Throttle func(context.Context) error
}

// NewBinder returns a Binder that reads pods with pods (IndexerLookup over
// the pod informer) and creates Bindings with client.
func NewBinder(client kubernetes.Interface, pods PodLookup, ledger *Ledger) *Binder {
	return &Binder{client: client, pods: pods, ledger: ledger}
}

// PodLookup finds a pod in the extender's pod cache.
type PodLookup func(namespace, name string) (*CachedPod, bool)

// IndexerLookup looks pods up by namespace/name in the pod informer's
// indexer, whose entries are CachedPods (or full pods, without the
// transform).
func IndexerLookup(idx cache.Indexer) PodLookup {
	return func(namespace, name string) (*CachedPod, bool) {
		obj, ok, err := idx.GetByKey(namespace + "/" + name)
		if err != nil || !ok {
			return nil, false
		}
		switch p := obj.(type) {
		case *CachedPod:
			return p, true
		case *v1.Pod:
			return Compact(p), true
		}
		return nil, false
	}
}

// Bind result labels of capscale_extender_binds_total, and conflict
// labels of capscale_extender_bind_conflicts_total.
const (
	BindBound        = "bound"
	BindAlreadyBound = "already_bound"
	BindNoRoom       = "no_room"
	BindNotBinder    = "not_binder"
	BindNotSent      = "not_sent"
	BindError        = "error"

	ConflictBoundElsewhere = "bound_elsewhere"
	ConflictInFlight       = "in_flight"
	ConflictNoRoom         = "no_room"
)

// BindRequest is kube-scheduler's bind call: a pod (UID optional) and the
// node it chose.
type BindRequest struct {
	Namespace, Name string
	UID             types.UID
	Node            string
}

// BindOutcome is what Bind did, for the caller to answer, count and tell
// Waiting.
type BindOutcome struct {
	// Result is a BindBound... label; Conflict, if set, a Conflict... one.
	Result, Conflict string
	// Freed is the room given back by a reservation the Binding refused.
	Freed int64
	// Err is nil when the pod is bound to the node (now or before); else
	// it is meant for ExtenderBindingResult.Error, and kube-scheduler
	// retries the pod.
	Err error
}

// Bind binds the pod to req.Node if the node still has room for it. A pod
// already bound to that node is a success: a bind that timed out on the
// scheduler's side may have landed.
func (b *Binder) Bind(ctx context.Context, req BindRequest) BindOutcome {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(req.Namespace, req.Name), "node", req.Node)
	out := b.bind(ctx, logger, req)
	if out.Err != nil {
		logger.V(2).Info("Bind refused", "result", out.Result, "err", out.Err)
		return out
	}
	logger.V(4).Info("Bound", "result", out.Result)
	return out
}

func (b *Binder) bind(ctx context.Context, logger klog.Logger, req BindRequest) BindOutcome {
	pod, err := b.lookup(ctx, req)
	if err != nil {
		return BindOutcome{Result: BindError, Err: err}
	}
	uid := req.UID
	if uid != "" && pod.UID != uid {
		return BindOutcome{Result: BindError, Err: fmt.Errorf("pod %s/%s has UID %s, not %s: it was recreated", req.Namespace, req.Name, pod.UID, uid)}
	}
	uid = pod.UID
	if pod.NodeName == req.Node {
		return BindOutcome{Result: BindAlreadyBound}
	}
	if pod.NodeName != "" {
		return BindOutcome{Result: BindError, Conflict: ConflictBoundElsewhere, Err: fmt.Errorf("pod %s/%s is already bound to node %s", req.Namespace, req.Name, pod.NodeName)}
	}
	if b.Gate != nil {
		until, err := b.Gate()
		if err != nil {
			return BindOutcome{Result: BindNotBinder, Err: fmt.Errorf("binding pod %s/%s: %w", req.Namespace, req.Name, err)}
		}
		// Nothing is sent after the lease could have passed to another
		// binder ID; what was sent before has the lease's grace to land.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, until)
		defer cancel()
	}
	if b.Throttle != nil {
		if err := b.Throttle(ctx); err != nil {
			return BindOutcome{Result: BindNotSent, Err: fmt.Errorf("binding pod %s/%s to node %s: not sent, the client-side rate limit did not admit it in time: %w", req.Namespace, req.Name, req.Node, err)}
		}
	}

	res := b.ledger.Reserve(uid, req.Namespace, req.Name, req.Node, pod.Need)
	switch {
	case res.AlreadyBound:
		return BindOutcome{Result: BindAlreadyBound}
	case res.BoundElsewhere != "":
		return BindOutcome{Result: BindError, Conflict: ConflictBoundElsewhere, Err: fmt.Errorf("binding pod %s/%s: %s", req.Namespace, req.Name, res.Verdict.Reason)}
	case res.InFlightElsewhere != "":
		return BindOutcome{Result: BindError, Conflict: ConflictInFlight, Err: fmt.Errorf("binding pod %s/%s to node %s: %s", req.Namespace, req.Name, req.Node, res.Verdict.Reason)}
	case !res.Verdict.Fit:
		return BindOutcome{Result: BindNoRoom, Conflict: ConflictNoRoom, Err: fmt.Errorf("binding pod %s/%s to node %s: %s", req.Namespace, req.Name, req.Node, res.Verdict.Reason)}
	}

	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name, UID: uid},
		Target:     v1.ObjectReference{Kind: "Node", Name: req.Node},
	}
	bc := b.client
	if b.BindClient != nil {
		bc = b.BindClient
	}
	err = bc.CoreV1().Pods(req.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	if err == nil {
		// The reservation stays until the informer shows the pod bound, or
		// the reconciler finds it gone from the node.
		b.ledger.Confirmed(uid, res.Token)
		return BindOutcome{Result: BindBound}
	}
	failed := fmt.Errorf("binding pod %s/%s to node %s: %w", req.Namespace, req.Name, req.Node, err)
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		if b.boundTo(ctx, req.Namespace, req.Name, uid) == req.Node {
			// An earlier attempt landed; the reservation (if any) ends when
			// the informer delivers the bound pod, or the reconciler finds
			// it gone from the node.
			b.ledger.Confirmed(uid, res.Token)
			return BindOutcome{Result: BindAlreadyBound}
		}
		return BindOutcome{Result: BindError, Conflict: ConflictBoundElsewhere, Freed: b.ledger.Release(uid, res.Token), Err: failed}
	}
	if ambiguous(err) {
		// The Binding may still land: keep the IPs reserved for a while.
		b.ledger.Unconfirmed(uid, res.Token)
		logger.Info("Binding outcome unknown, keeping the reservation", "err", err)
		return BindOutcome{Result: BindError, Err: failed}
	}
	return BindOutcome{Result: BindError, Freed: b.ledger.Release(uid, res.Token), Err: failed}
}

// lookup finds the pod's UID, node and need. The cache holds bound pods
// only; for a pending pod, the need its filter call recorded is used, and
// when there is none (the extender restarted between filter and bind), one
// GET reads the pod.
func (b *Binder) lookup(ctx context.Context, req BindRequest) (*CachedPod, error) {
	if pod, ok := b.pods(req.Namespace, req.Name); ok {
		return pod, nil
	}
	if req.UID != "" {
		if need, ok := b.ledger.RememberedNeed(req.UID); ok {
			return &CachedPod{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name, UID: req.UID}, Need: need}, nil
		}
	}
	pod, err := b.client.CoreV1().Pods(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", req.Namespace, req.Name, err)
	}
	return Compact(pod), nil
}

// boundTo returns the node the pod is bound to, from the informer or, since
// this only runs after a conflicting Binding, one GET to the API server.
func (b *Binder) boundTo(ctx context.Context, namespace, name string, uid types.UID) string {
	if pod, ok := b.pods(namespace, name); ok && pod.UID == uid && pod.NodeName != "" {
		return pod.NodeName
	}
	pod, err := b.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || pod.UID != uid {
		return ""
	}
	return pod.Spec.NodeName
}

// ambiguous reports whether a failed Binding may nevertheless have been
// persisted: timeouts, cancelled contexts, transport and server errors.
func ambiguous(err error) bool {
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.As(err, &netErr):
		return true
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsInternalError(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsUnexpectedServerError(err):
		return true
	}
	var status apierrors.APIStatus
	return !errors.As(err, &status)
}
