package extender

import (
	"context"
	"errors"
	"fmt"
	"net"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Binder binds pods for kube-scheduler, re-checking the node's capacity under
// the ledger lock first.
type Binder struct {
	client  kubernetes.Interface
	pods    PodLookup
	ledger  *Ledger
	metrics *Metrics
	// Gate, if set, must return nil before any Binding is made: the
	// binder lease (extender/binderlease) that keeps a second extender,
	// whose ledger this one cannot see, from binding at the same time.
	Gate func() error
}

// NewBinder returns a Binder that reads pods with pods (IndexerLookup over
// the pod informer) and creates Bindings with client.
func NewBinder(client kubernetes.Interface, pods PodLookup, ledger *Ledger) *Binder {
	return &Binder{client: client, pods: pods, ledger: ledger, metrics: ledger.metrics}
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

// Bind result labels of capscale_extender_binds_total.
const (
	bindBound        = "bound"
	bindAlreadyBound = "already_bound"
	bindNoRoom       = "no_room"
	bindNotBinder    = "not_binder"
	bindError        = "error"
)

// Bind binds the pod in args to args.Node if the node still has room for it.
// A pod already bound to that node is a success: a bind that timed out on the
// scheduler's side may have landed. The returned error is meant for
// ExtenderBindingResult.Error; kube-scheduler then retries the pod.
func (b *Binder) Bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) error {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(args.PodNamespace, args.PodName), "node", args.Node)
	result, err := b.bind(ctx, logger, args)
	b.metrics.Binds.WithLabelValues(result).Inc()
	if err != nil {
		logger.V(2).Info("Bind refused", "result", result, "err", err)
		return err
	}
	logger.V(4).Info("Bound", "result", result)
	return nil
}

func (b *Binder) bind(ctx context.Context, logger klog.Logger, args *extenderv1.ExtenderBindingArgs) (string, error) {
	pod, err := b.lookup(ctx, args)
	if err != nil {
		return bindError, err
	}
	uid := args.PodUID
	if uid != "" && pod.UID != uid {
		return bindError, fmt.Errorf("pod %s/%s has UID %s, not %s: it was recreated", args.PodNamespace, args.PodName, pod.UID, uid)
	}
	uid = pod.UID
	if pod.NodeName == args.Node {
		return bindAlreadyBound, nil
	}
	if pod.NodeName != "" {
		b.metrics.BindConflicts.WithLabelValues("bound_elsewhere").Inc()
		return bindError, fmt.Errorf("pod %s/%s is already bound to node %s", args.PodNamespace, args.PodName, pod.NodeName)
	}
	need := pod.Need
	if b.Gate != nil {
		if err := b.Gate(); err != nil {
			return bindNotBinder, fmt.Errorf("binding pod %s/%s: %w", args.PodNamespace, args.PodName, err)
		}
	}

	res := b.ledger.Reserve(uid, args.PodNamespace, args.PodName, args.Node, need)
	switch {
	case res.AlreadyBound:
		return bindAlreadyBound, nil
	case res.BoundElsewhere != "":
		b.metrics.BindConflicts.WithLabelValues("bound_elsewhere").Inc()
		return bindError, fmt.Errorf("binding pod %s/%s: %s", args.PodNamespace, args.PodName, res.Verdict.Reason)
	case res.InFlightElsewhere != "":
		b.metrics.BindConflicts.WithLabelValues("in_flight").Inc()
		return bindError, fmt.Errorf("binding pod %s/%s to node %s: %s", args.PodNamespace, args.PodName, args.Node, res.Verdict.Reason)
	case !res.Verdict.Fit:
		b.metrics.BindConflicts.WithLabelValues("no_room").Inc()
		return bindNoRoom, fmt.Errorf("binding pod %s/%s to node %s: %s", args.PodNamespace, args.PodName, args.Node, res.Verdict.Reason)
	}

	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: args.PodNamespace, Name: args.PodName, UID: uid},
		Target:     v1.ObjectReference{Kind: "Node", Name: args.Node},
	}
	err = b.client.CoreV1().Pods(args.PodNamespace).Bind(ctx, binding, metav1.CreateOptions{})
	if err == nil {
		// The reservation stays until the informer shows the pod bound, or
		// the reconciler finds it gone from the node.
		b.ledger.Confirmed(uid, res.Token)
		return bindBound, nil
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		if b.boundTo(ctx, args.PodNamespace, args.PodName, uid) == args.Node {
			// An earlier attempt landed; the reservation (if any) ends when
			// the informer delivers the bound pod, or the reconciler finds
			// it gone from the node.
			b.ledger.Confirmed(uid, res.Token)
			return bindAlreadyBound, nil
		}
		b.ledger.Release(uid, res.Token)
		b.metrics.BindConflicts.WithLabelValues("bound_elsewhere").Inc()
		return bindError, fmt.Errorf("binding pod %s/%s to node %s: %w", args.PodNamespace, args.PodName, args.Node, err)
	}
	if ambiguous(err) {
		// The Binding may still land: keep the IPs reserved for a while.
		b.ledger.Unconfirmed(uid, res.Token)
		logger.Info("Binding outcome unknown, keeping the reservation", "err", err)
	} else {
		b.ledger.Release(uid, res.Token)
	}
	return bindError, fmt.Errorf("binding pod %s/%s to node %s: %w", args.PodNamespace, args.PodName, args.Node, err)
}

// lookup finds the pod's UID, node and need. The cache holds bound pods
// only; for a pending pod, the need its filter call recorded is used, and
// when there is none (the extender restarted between filter and bind), one
// GET reads the pod.
func (b *Binder) lookup(ctx context.Context, args *extenderv1.ExtenderBindingArgs) (*CachedPod, error) {
	if pod, ok := b.pods(args.PodNamespace, args.PodName); ok {
		return pod, nil
	}
	if args.PodUID != "" {
		if need, ok := b.ledger.RememberedNeed(args.PodUID); ok {
			return &CachedPod{ObjectMeta: metav1.ObjectMeta{Namespace: args.PodNamespace, Name: args.PodName, UID: args.PodUID}, Need: need}, nil
		}
	}
	pod, err := b.client.CoreV1().Pods(args.PodNamespace).Get(ctx, args.PodName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", args.PodNamespace, args.PodName, err)
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
