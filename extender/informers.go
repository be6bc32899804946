package extender

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/underlay"
)

// PodInformer returns factory's pod informer restricted to bound,
// non-terminal pods and caching only what the extender reads (StripPod
// replaces the factory's transform, which it subsumes). Call it before the
// factory starts.
//
// Only bound pods hold IPs. A pending pod's create, and the status writes
// kube-scheduler and the requeuer make while it waits, were a third or more
// of the pod events the extender decoded, for every pod in the cluster; what
// bind needs of a pending pod, filter remembers (Ledger.RememberNeed), and
// Waiting forgets a pending pod deleted unseen by its TTL or at the touch.
func PodInformer(factory informers.SharedInformerFactory) (cache.SharedIndexInformer, error) {
	return kube.BoundPodInformer(factory, StripPod)
}

// CachedPod is all the extender keeps of a pod: identity, node, phase and
// the underlay IPs it needs. A stripped v1.Pod still costs about 3 KB (its
// structs and resource maps); this costs a few hundred bytes, which is what
// makes 50,000 pods fit in the extender's memory budget.
type CachedPod struct {
	metav1.TypeMeta
	// Only Name, Namespace, UID, ResourceVersion and DeletionTimestamp.
	metav1.ObjectMeta
	NodeName string
	Phase    v1.PodPhase
	// Need is PodNeed of the full pod, computed once.
	Need int64
	// PodNetwork: the pod is not hostNetwork, so a draws-all node's pool
	// gives it an IP whatever it asks (underlay.Charge).
	PodNetwork bool
	// TerminationGrace is spec.terminationGracePeriodSeconds: with
	// DeletionGracePeriodSeconds (kept in ObjectMeta), how long a deleted
	// pod's IPs may stay held (held.go).
	TerminationGrace *int64
	// Listed: the pod has its IPs (underlay.Listed), so its IPAM can list
	// them.
	Listed bool
}

// DeepCopyObject makes CachedPod a runtime.Object, as informer caches expect.
func (p *CachedPod) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// Terminal reports whether the pod has finished (and so holds no IPs).
func (p *CachedPod) Terminal() bool {
	return p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed
}

// Compact reduces pod to what the ledger and the binder read.
func Compact(pod *v1.Pod) *CachedPod {
	return &CachedPod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp,
			DeletionGracePeriodSeconds: pod.DeletionGracePeriodSeconds,
		},
		NodeName:         pod.Spec.NodeName,
		Phase:            pod.Status.Phase,
		Need:             underlay.PodNeed(pod),
		PodNetwork:       underlay.PodNetwork(pod),
		TerminationGrace: pod.Spec.TerminationGracePeriodSeconds,
		Listed:           underlay.Listed(pod),
	}
}

// StripPod is the pod cache's transform: it replaces each *v1.Pod with its
// CachedPod. Other objects (deletion tombstones) pass through.
func StripPod(obj any) (any, error) {
	if pod, ok := obj.(*v1.Pod); ok {
		return Compact(pod), nil
	}
	return obj, nil
}

// Tracker keeps a Ledger following the cluster: it applies the pod and
// node informers' events and, every 10 s, expires reservations. What each
// change did is counted here and told to Waiting, not in the ledger.
type Tracker struct {
	Ledger *Ledger
	// Waiting, if not nil, learns of every release of IPs and of pods that
	// are bound or gone.
	Waiting *Waiting
	// Metrics must not be nil.
	Metrics *Metrics
	// UsageChanged, if not nil, learns the node of every pod event that may
	// move the IPs in use there (a pod needing IPs bound, finished or
	// deleted), after the ledger has applied it: native mode's publisher
	// republishes an invalid node, which publishes exactly those IPs.
	UsageChanged func(node string)
	// Over, if not nil, is the node as the capacity rule reads it: native
	// mode's own read of the capacity sources (extender/sourced) in the
	// place of the mirror's annotations.
	Over func(*v1.Node) *v1.Node
	// after runs f after d; nil is time.AfterFunc (tests run f at once).
	after func(d time.Duration, f func())
}

// Attach feeds the ledger from the pod and node informers. The returned
// function reports whether both handlers have received their informer's
// initial list, i.e. whether the ledger has been rebuilt: only then may the
// extender answer.
func (t *Tracker) Attach(pods, nodes cache.SharedIndexInformer) (synced func() bool, err error) {
	pr, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.onPod(obj) },
		UpdateFunc: func(_, obj any) { t.onPod(obj) },
		DeleteFunc: func(obj any) { t.onPodDelete(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("adding the ledger's pod event handler: %w", err)
	}
	nr, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.onNode(obj) },
		UpdateFunc: func(_, obj any) { t.onNode(obj) },
		DeleteFunc: func(obj any) { t.onNodeDelete(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("adding the ledger's node event handler: %w", err)
	}
	return func() bool { return pr.HasSynced() && nr.HasSynced() }, nil
}

// PendingPodInformer follows the metadata of the pods not yet bound,
// keeping only their identity: the waiting set must learn of a pending pod
// deleted without ever being bound, which the bound-pod informer never
// sees.
func PendingPodInformer(mc metadata.Interface) (cache.SharedIndexInformer, error) {
	return kube.PendingPodInformer(mc, func(obj any) (any, error) {
		if p, ok := obj.(*metav1.PartialObjectMetadata); ok {
			return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
				Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion}}, nil
		}
		return obj, nil
	})
}

// PendingGrace is how long after a pod leaves the pending informer the
// waiting set looks for it among the bound pods: the pending watch reports
// a pod that gets bound as a delete too, and the bound-pod watch's event
// often comes second (the e2e suite saw 12 of 20 reuses so).
const PendingGrace = 2 * time.Second

// AttachPending makes the waiting set forget a pod that leaves the pending
// informer without being bound: it was deleted. A pod the bound-pod cache
// holds PendingGrace later was bound, and is left to SetPod.
func (t *Tracker) AttachPending(pending cache.SharedIndexInformer, bound PodLookup) error {
	_, err := pending.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) { t.pendingGone(obj, bound) },
	})
	if err != nil {
		return fmt.Errorf("adding the waiting set's pending pod handler: %w", err)
	}
	return nil
}

func (t *Tracker) pendingGone(obj any, bound PodLookup) {
	obj = kube.Deleted(obj)
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ns, name, uid := m.GetNamespace(), m.GetName(), m.GetUID()
	after := t.after
	if after == nil {
		after = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	after(PendingGrace, func() {
		if p, ok := bound(ns, name); ok && p.UID == uid {
			return
		}
		t.Waiting.Gone(uid)
	})
}

// Run expires stale reservations and hints until ctx is done.
func (t *Tracker) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, func(context.Context) { t.expire() }, 10*time.Second)
}

func (t *Tracker) expire() {
	n, room := t.Ledger.Expire()
	t.Metrics.ExpiredReservations.Add(float64(n))
	t.Waiting.Freed(room)
}

// SetPod applies a pod add or update (tests and the informer).
func (t *Tracker) SetPod(pod *CachedPod) {
	t.Waiting.Freed(t.Ledger.SetCachedPod(pod))
	t.usageChanged(pod)
	switch {
	case Holds(pod):
		if d, ok := t.Waiting.Bound(pod.UID); ok {
			t.Metrics.FreedIPReuse.Observe(d.Seconds())
		}
	case pod.Terminal():
		t.Waiting.Forget(pod.UID)
	}
}

// DeletePod applies a pod deletion.
func (t *Tracker) DeletePod(uid types.UID) {
	t.Waiting.Freed(t.Ledger.DeletePod(uid))
	t.Waiting.Forget(uid)
}

// SetNode applies a node add or update.
func (t *Tracker) SetNode(node *v1.Node) {
	if t.Over != nil {
		node = t.Over(node)
	}
	c := t.Ledger.SetNode(node)
	t.Waiting.FreedOn(node.Name, c.Freed)
	switch {
	case !c.Changed:
	case c.Invalid != "":
		t.Metrics.InvalidCapacityAnnotations.Inc()
		klog.ErrorS(nil, "Invalid underlay IP capacity annotation, node gets no underlay IPs", "node", klog.KObj(node), "reason", c.Invalid)
	default:
		klog.V(2).InfoS("Node underlay IP capacity", "node", klog.KObj(node), "capacity", c.Capacity)
	}
}

func (t *Tracker) onPod(obj any) {
	switch pod := obj.(type) {
	case *CachedPod:
		t.SetPod(pod)
	case *v1.Pod:
		t.SetPod(Compact(pod))
	}
}

// usageChanged tells UsageChanged of a pod event on a node where the pod
// needs IPs, or takes one from a draws-all pool.
func (t *Tracker) usageChanged(pod *CachedPod) {
	if t.UsageChanged != nil && pod.NodeName != "" && (pod.Need > 0 || pod.PodNetwork) {
		t.UsageChanged(pod.NodeName)
	}
}

func (t *Tracker) onPodDelete(obj any) {
	_, tombstone := obj.(cache.DeletedFinalStateUnknown)
	obj = kube.Deleted(obj)
	switch pod := obj.(type) {
	case *CachedPod:
		t.deleted(pod, tombstone)
		t.usageChanged(pod)
	case *v1.Pod:
		cp := Compact(pod)
		t.deleted(cp, tombstone)
		t.usageChanged(cp)
	default:
		klog.ErrorS(nil, "Unexpected object in pod delete event", "type", fmt.Sprintf("%T", obj))
	}
}

func (t *Tracker) onNode(obj any) {
	if node, ok := obj.(*v1.Node); ok {
		t.SetNode(node)
	}
}

func (t *Tracker) onNodeDelete(obj any) {
	obj = kube.Deleted(obj)
	node, ok := obj.(*v1.Node)
	if !ok {
		klog.ErrorS(nil, "Unexpected object in node delete event", "type", fmt.Sprintf("%T", obj))
		return
	}
	t.Ledger.DeleteNode(node.Name)
}
