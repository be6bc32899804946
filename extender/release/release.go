// Package release is native mode's answer to a force delete: it removes
// the finalizer capscale.io/underlay-ip-release, which a
// MutatingAdmissionPolicy puts on every pod that asks for
// capscale.io/underlay-ip (deploy/native/release.yaml), once the pod's node
// gave its IPs back (underlay.Release). Until then a pod deleted with grace
// 0 stays in the API, Terminating, and kube-scheduler keeps counting its
// request on its node, so nothing is bound into an IP its node still holds.
//
// It runs beside the capacity publisher, on the leader only; each term
// lists every pod again, so a finalizer whose moment came while no replica
// led is removed at the start of the next term.
package release

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// Finalizer is the finalizer the releaser removes.
const Finalizer = names.UnderlayIPReleaseFinalizer

// Policy names the MutatingAdmissionPolicy that puts Finalizer on pods,
// and its binding (deploy/native/release.yaml).
const Policy = "capscale-underlay-ip-release"

// ReadyRecheck is how often a pod held past its hold on a node that
// answers is looked at again: the node may stop answering meanwhile, and
// its Ready condition is read from the API, not watched.
const ReadyRecheck = 10 * time.Second

// byNode indexes the cached pods that carry the finalizer by node.
const byNode = "node"

// Releaser removes the finalizer. Run it on the leader only.
type Releaser struct {
	client kubernetes.Interface
	nodes  corelisters.NodeLister
	synced cache.InformerSynced
	clock  clock.Clock
	// podInformer makes each term's pod informer.
	podInformer func() cache.SharedIndexInformer

	// decide is underlay.Release, or underlay.Cleanup at uninstall.
	decide func(underlay.Releasing, time.Time) (string, time.Duration)

	term     atomic.Pointer[term]
	removals *prometheus.CounterVec
}

// term is one leadership term: its own informer and queue, since neither
// can run again once stopped.
type term struct {
	queue workqueue.TypedRateLimitingInterface[string]
	pods  cache.Indexer
}

// New returns a releaser that reads Nodes from nodes (extender.CompactNode's
// are enough: it reads only whether a node exists there) and registers its
// metric with reg, if not nil.
func New(client kubernetes.Interface, nodes coreinformers.NodeInformer, reg prometheus.Registerer) (*Releaser, error) {
	r := &Releaser{
		client: client,
		decide: underlay.Release,
		nodes:  nodes.Lister(),
		synced: nodes.Informer().HasSynced,
		clock:  clock.RealClock{},
		removals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "capscale", Subsystem: "extender", Name: "release_finalizer_removals_total",
			Help: "Pods whose capscale.io/underlay-ip-release finalizer native mode removed, by reason (finished, unbound, node_gone, hold_over, wait_exceeded).",
		}, []string{"reason"}),
	}
	r.podInformer = func() cache.SharedIndexInformer { return PodInformer(client) }
	if reg != nil {
		if err := reg.Register(r.removals); err != nil {
			return nil, fmt.Errorf("registering the releaser's metric: %w", err)
		}
	}
	// A node deleted releases its pods at once: the pod garbage collector
	// deletes them with grace 0, and their IPs went with the node.
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: r.nodeGone}); err != nil {
		return nil, fmt.Errorf("adding the releaser's node event handler: %w", err)
	}
	return r, nil
}

// NewCleanup returns a releaser for the uninstall (`extender
// release-cleanup`): it removes the finalizer from every pod as
// underlay.Cleanup says, by deadline at the latest, and registers no metric.
func NewCleanup(client kubernetes.Interface, nodes coreinformers.NodeInformer, deadline time.Time) (*Releaser, error) {
	r, err := New(client, nodes, nil)
	if err != nil {
		return nil, err
	}
	r.decide = func(rel underlay.Releasing, now time.Time) (string, time.Duration) {
		return underlay.Cleanup(rel, now, deadline)
	}
	return r, nil
}

// Carrying returns the pods (namespace/name) that still carry the
// finalizer in the running term's cache; synced is false while no term
// has synced it, when the list means nothing.
func (r *Releaser) Carrying() (pods []string, synced bool) {
	t := r.term.Load()
	if t == nil {
		return nil, false
	}
	for _, obj := range t.pods.List() {
		if p, ok := obj.(*extender.CachedPod); ok && slices.Contains(p.Finalizers, Finalizer) {
			pods = append(pods, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(pods)
	return pods, true
}

// PodInformer follows every pod, bound or not, terminal or not (a pod that
// finished before it was deleted still carries the finalizer), caching
// extender.CachedPod and, for the pods that carry the finalizer, their
// finalizers.
func PodInformer(client kubernetes.Interface) cache.SharedIndexInformer {
	inf := coreinformers.NewPodInformer(client, metav1.NamespaceAll, 0, cache.Indexers{byNode: indexByNode})
	// SetTransform fails only on a started informer.
	_ = inf.SetTransform(compact)
	return inf
}

func compact(obj any) (any, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return obj, nil
	}
	c := extender.Compact(pod)
	if slices.Contains(pod.Finalizers, Finalizer) {
		c.Finalizers = slices.Clone(pod.Finalizers)
	}
	return c, nil
}

func indexByNode(obj any) ([]string, error) {
	if p, ok := obj.(*extender.CachedPod); ok && p.NodeName != "" && slices.Contains(p.Finalizers, Finalizer) {
		return []string{p.NodeName}, nil
	}
	return nil, nil
}

func (r *Releaser) nodeGone(obj any) {
	n, ok := kube.Deleted(obj).(*v1.Node)
	t := r.term.Load()
	if !ok || t == nil {
		return
	}
	keys, _ := t.pods.IndexKeys(byNode, n.Name)
	for _, k := range keys {
		t.queue.Add(k)
	}
}

// Run removes finalizers until ctx is done (leadership lost or shutdown).
// It may be called again after it returned, once per term.
func (r *Releaser) Run(ctx context.Context) {
	inf := r.podInformer()
	t := &term{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "underlay-ip-release"}),
		pods: inf.GetIndexer(),
	}
	defer t.queue.ShutDown()
	enqueue := func(obj any) {
		if p, ok := obj.(*extender.CachedPod); ok && slices.Contains(p.Finalizers, Finalizer) {
			if key, err := cache.MetaNamespaceKeyFunc(p); err == nil {
				t.queue.Add(key)
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
	}); err != nil {
		klog.ErrorS(err, "Adding the releaser's pod event handler")
		return
	}
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, r.synced) {
		return
	}
	r.term.Store(t)
	defer r.term.CompareAndSwap(t, nil)
	klog.InfoS("Releasing the underlay-IP finalizer of pods whose node gave their IPs back", "finalizer", Finalizer)
	go func() {
		<-ctx.Done()
		t.queue.ShutDown()
	}()
	sync := func(ctx context.Context, key string) (time.Duration, error) { return r.sync(ctx, t, key) }
	for kube.ProcessNext(ctx, t.queue, sync, "Releasing the underlay-IP finalizer failed, retrying", "pod") {
	}
}

// sync removes key's finalizer if r.decide says so, and returns
// when to look again otherwise.
func (r *Releaser) sync(ctx context.Context, t *term, key string) (time.Duration, error) {
	obj, exists, err := t.pods.GetByKey(key)
	if err != nil || !exists {
		return 0, err
	}
	pod, ok := obj.(*extender.CachedPod)
	if !ok {
		return 0, nil
	}
	at := slices.Index(pod.Finalizers, Finalizer)
	if at < 0 {
		return 0, nil
	}
	rel := underlay.Releasing{DeletionGrace: pod.DeletionGracePeriodSeconds, NodeName: pod.NodeName, Phase: pod.Phase, NodeReady: true}
	if pod.DeletionTimestamp != nil {
		rel.Deleting = &pod.DeletionTimestamp.Time
	}
	now := r.clock.Now()
	if rel.Deleting != nil && underlay.Holds(pod.NodeName, pod.Phase) {
		if rel.NodeGone, err = r.nodeGoneFromAPI(ctx, pod.NodeName); err != nil {
			return 0, err
		}
		// Whether the node answers matters only once the hold is over:
		// read it then, from the API (the node cache keeps no conditions).
		if !rel.NodeGone && !now.Before(underlay.HeldUntil(rel)) {
			if rel.NodeReady, rel.NodeGone, err = r.nodeReady(ctx, pod.NodeName); err != nil {
				return 0, err
			}
		}
	}
	why, after := r.decide(rel, now)
	if why == "" {
		if rel.Deleting != nil && !now.Before(underlay.HeldUntil(rel)) {
			after = min(after, ReadyRecheck)
		}
		return after, nil
	}
	if err := r.remove(ctx, pod, at); err != nil {
		return 0, err
	}
	r.removals.WithLabelValues(why).Inc()
	klog.V(2).InfoS("Released the underlay-IP finalizer", "pod", klog.KObj(pod), "node", pod.NodeName, "reason", why)
	return 0, nil
}

// nodeGoneFromAPI reports whether node is not in the API: absent from the
// cache and confirmed by a read, so that a node the cache has not seen yet
// never counts as gone.
func (r *Releaser) nodeGoneFromAPI(ctx context.Context, node string) (bool, error) {
	if _, err := r.nodes.Get(node); err == nil {
		return false, nil
	}
	_, err := r.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading node %s: %w", node, err)
	}
	return false, nil
}

// nodeReady reads node's Ready condition from the API.
func (r *Releaser) nodeReady(ctx context.Context, node string) (ready, gone bool, err error) {
	n, err := r.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, true, nil
	case err != nil:
		return false, false, fmt.Errorf("reading node %s: %w", node, err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue, false, nil
		}
	}
	return false, false, nil
}

// remove takes the finalizer at index at off pod: a JSON patch that tests
// the UID and the finalizer first, so that it never removes another
// finalizer or touches a pod re-created under the same name. A pod
// already gone is done.
func (r *Releaser) remove(ctx context.Context, pod *extender.CachedPod, at int) error {
	patch := fmt.Appendf(nil, `[{"op":"test","path":"/metadata/uid","value":%q},{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`,
		pod.UID, at, Finalizer, at)
	_, err := r.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "capscale-underlay-ip-release"})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer %s from pod %s/%s: %w", Finalizer, pod.Namespace, pod.Name, err)
	}
	return nil
}
