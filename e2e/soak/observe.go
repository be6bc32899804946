package soak

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/underlay"
)

// observer follows Nodes and Pods through informers and remembers what
// the checker needs that an object does not say: when a capacity was
// lowered, when a pod was first seen bound, when one went away, and the
// IPs freed so far.
type observer struct {
	def int64
	// published: native mode, where kube-scheduler counts the capacity the
	// publisher wrote into Node status, so a capacity counts as lowered
	// when that value falls; publishLags are the delays from a capacity
	// change to the matching published value.
	published   bool
	publishLags []time.Duration
	// changed: node -> when its capacity by the rule last changed, until
	// the published value matches it.
	changed map[string]time.Time

	mu sync.Mutex
	// capacity and lowered: each node's capacity by the rule, and when it
	// was last seen to fall.
	capacity map[string]int64
	lowered  map[string]time.Time
	// pub: node -> its published capacity (-1: none), native mode only.
	pub map[string]int64
	// invalid: node -> its capacity value is invalid.
	invalid map[string]bool
	// boundAt: pod UID -> first seen bound; goneAt: UID -> seen deleted.
	boundAt map[types.UID]time.Time
	goneAt  map[types.UID]time.Time
	freed   int64
	// left: the underlay pods that stopped being Pending since the last
	// snapshot, and when.
	left []Left
	// bound counts binds seen, for the rate.
	bound int64

	nodes cache.Store
	pods  cache.Store
}

func newObserver(ctx context.Context, c kubernetes.Interface, def int64, published bool) (*observer, error) {
	o := &observer{def: def, published: published, changed: map[string]time.Time{}, pub: map[string]int64{}, invalid: map[string]bool{}, capacity: map[string]int64{}, lowered: map[string]time.Time{},
		boundAt: map[types.UID]time.Time{}, goneAt: map[types.UID]time.Time{}}
	f := informers.NewSharedInformerFactory(c, 0)
	ni, pi := f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer()
	nr, err := ni.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.node(obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { o.node(obj.(*corev1.Node)) },
		DeleteFunc: func(obj any) {
			if n, ok := kube.Deleted(obj).(*corev1.Node); ok {
				o.mu.Lock()
				delete(o.capacity, n.Name)
				delete(o.lowered, n.Name)
				delete(o.pub, n.Name)
				delete(o.changed, n.Name)
				delete(o.invalid, n.Name)
				o.mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	pr, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.pod(nil, obj.(*corev1.Pod)) },
		UpdateFunc: func(old, obj any) { o.pod(old.(*corev1.Pod), obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if p, ok := kube.Deleted(obj).(*corev1.Pod); ok {
				o.gone(p)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	o.nodes, o.pods = ni.GetStore(), pi.GetStore()
	f.Start(ctx.Done())
	// The stores fill before the handlers have seen every object: wait for
	// the handlers, or a snapshot lists nodes whose capacity is not known
	// yet (5000 nodes: a third of the IPs missing, the churn sized to it).
	if !cache.WaitForCacheSync(ctx.Done(), nr.HasSynced, pr.HasSynced) {
		return nil, ctx.Err()
	}
	return o, nil
}

func (o *observer) node(n *corev1.Node) {
	rule := underlay.NodeCapacity(n.Annotations, n.Labels, o.def)
	c := rule.IPs
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.invalid[n.Name] = rule.Invalid != ""
	if old, ok := o.capacity[n.Name]; ok {
		switch {
		case c < old && !o.published:
			o.lowered[n.Name] = now
		case c > old:
			o.freed += c - old
		}
		if c != old {
			o.changed[n.Name] = now
		}
	}
	o.capacity[n.Name] = c
	if !o.published {
		return
	}
	pub := int64(-1)
	if q, ok := n.Status.Allocatable[underlay.Resource]; ok {
		pub = q.Value()
	}
	if old, ok := o.pub[n.Name]; ok && pub < old {
		o.lowered[n.Name] = now
	}
	o.pub[n.Name] = pub
	if t, ok := o.changed[n.Name]; ok && (pub == c || rule.Invalid != "") {
		o.publishLags = append(o.publishLags, now.Sub(t))
		delete(o.changed, n.Name)
	}
}

// unpublished counts the nodes whose published capacity (native mode) is
// not yet their capacity by the rule; an invalid node publishes its IPs in
// use instead, so it counts once anything is published.
func (o *observer) unpublished() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for name, c := range o.capacity {
		pub, ok := o.pub[name]
		if !ok || pub < 0 || (!o.invalid[name] && pub != c) {
			n++
		}
	}
	return n
}

func holds(p *corev1.Pod) bool { return underlay.Holds(p.Spec.NodeName, p.Status.Phase) }

// unbound: not yet bound, not being deleted; with a need, a Pending
// underlay pod.
func unbound(p *corev1.Pod) bool {
	return p.Spec.NodeName == "" && p.Status.Phase == corev1.PodPending && p.DeletionTimestamp == nil
}

func pending(p *corev1.Pod) bool { return unbound(p) && underlay.PodNeed(p) > 0 }

// leftPending notes a pod that was Pending in its last state and is not
// in its new one (nil: deleted); o.mu is held.
func (o *observer) leftPending(was, now *corev1.Pod) {
	if was != nil && pending(was) && (now == nil || !pending(now)) {
		o.left = append(o.left, Left{UID: string(was.UID), At: time.Now()})
	}
}

func (o *observer) pod(old, p *corev1.Pod) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.leftPending(old, p)
	if p.Spec.NodeName != "" {
		if _, ok := o.boundAt[p.UID]; !ok {
			o.boundAt[p.UID] = boundBy(p, time.Now())
			o.bound++
		}
	}
	if old != nil && holds(old) && !holds(p) {
		// Finished: its IPs are free.
		o.freed += underlay.PodNeed(p)
	}
}

// boundBy is when pod was bound at the latest, first seen bound at seen.
// The apiserver's bind stamps the PodScheduled condition (whole seconds,
// so the bind came before that time + 1 s): where that is earlier, the
// sampler's own pod watch lagged (it reconnects with a backoff after a
// kube-apiserver restart, apart from its Node watch), and a bind seen late
// must not read as one made after a capacity was lowered.
func boundBy(pod *corev1.Pod, seen time.Time) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			if stamped := c.LastTransitionTime.Add(time.Second); stamped.Before(seen) {
				return stamped
			}
		}
	}
	return seen
}

func (o *observer) gone(p *corev1.Pod) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.goneAt[p.UID] = time.Now()
	o.leftPending(p, nil)
	if holds(p) {
		o.freed += underlay.PodNeed(p)
	}
}

// snapshot fills the apiserver's side of a sample: nodes with capacity,
// used, lowered and last-bound times, and the Pending underlay pods.
func (o *observer) snapshot(s *Sample) {
	pods := o.pods.List()
	nodes := o.nodes.List()
	o.mu.Lock()
	defer o.mu.Unlock()
	used := map[string]int64{}
	last := map[string]time.Time{}
	s.Pending = s.Pending[:0]
	for _, obj := range pods {
		p := obj.(*corev1.Pod)
		need := underlay.PodNeed(p)
		switch {
		case need == 0:
		case holds(p):
			used[p.Spec.NodeName] += need
			if t := o.boundAt[p.UID]; t.After(last[p.Spec.NodeName]) {
				last[p.Spec.NodeName] = t
			}
		case unbound(p):
			s.Pending = append(s.Pending, Pending{UID: string(p.UID), Name: p.Namespace + "/" + p.Name, Need: need, Created: p.CreationTimestamp.Time})
		}
	}
	s.LeftPending, o.left = append(s.LeftPending[:0], o.left...), o.left[:0]
	s.Nodes = s.Nodes[:0]
	for _, obj := range nodes {
		n := obj.(*corev1.Node)
		nd := Node{Name: n.Name, Capacity: o.capacity[n.Name], Invalid: o.invalid[n.Name], Lowered: o.lowered[n.Name], Used: used[n.Name],
			LastBound: last[n.Name], Schedulable: schedulable(n)}
		if s.View == "published" {
			if q, ok := n.Status.Allocatable[underlay.Resource]; ok {
				v := q.Value()
				nd.View, nd.Enforced = &v, &v
			}
		}
		s.Nodes = append(s.Nodes, nd)
	}
	s.FreedIPs = o.freed
}

// schedulable: not being deleted, not cordoned, no NoSchedule taint, Ready.
func schedulable(n *corev1.Node) bool {
	if n.DeletionTimestamp != nil || n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podTimes says, for a reservation, how long its pod has been bound or
// gone as this observer saw it.
func (o *observer) podTimes(uid types.UID, now time.Time) (boundFor, goneFor time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t, ok := o.goneAt[uid]; ok {
		return 0, now.Sub(t)
	}
	if t, ok := o.boundAt[uid]; ok {
		return now.Sub(t), 0
	}
	return 0, 0
}

// binds is the number of pods seen bound so far.
func (o *observer) binds() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bound
}

// lags returns the publish delays seen so far (native mode).
func (o *observer) lags() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Duration(nil), o.publishLags...)
}
