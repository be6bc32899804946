package schedplugin

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/underlay"
)

// holds are the IPs of force-deleted pods that their node may still hold:
// kube-scheduler dropped the pod from its NodeInfo when the object went,
// but the kubelet stops its sandbox (and gives its IP back) only later
// (underlay.HoldAfterDelete). Filter and Score charge them to the node
// until the hold ends; the pods Filter turned away because of a hold are
// activated then, since no cluster event marks that moment.
type holds struct {
	// activate moves pods back to the active queue (the framework
	// handle's Activate); after runs f after d (time.AfterFunc).
	activate func(map[string]*v1.Pod)
	after    func(d time.Duration, f func())
	// drawsAll reports whether a node that draws all has been read (the
	// plugin's drawsAll): only then may a pod that asked for no IP hold
	// one. nil: never.
	drawsAll func() bool

	mu     sync.Mutex
	pods   map[types.UID]heldIPs
	byNode map[string]int64
	// drawnByNode is what the held pods draw beyond their need on a node
	// that draws all (underlay.Drawn), charged only there.
	drawnByNode map[string]int64
	// waiting are the pods a hold turned away, by namespace/name.
	waiting map[string]*v1.Pod
}

type heldIPs struct {
	node        string
	need, drawn int64
}

func newHolds(activate func(map[string]*v1.Pod)) *holds {
	return &holds{activate: activate, after: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		pods: map[types.UID]heldIPs{}, byNode: map[string]int64{}, drawnByNode: map[string]int64{}, waiting: map[string]*v1.Pod{}}
}

// watch follows the pod and node informers: a pod deleted while it still
// held IPs starts a hold; a deleted node ends its holds.
func (h *holds) watch(pods, nodes cache.SharedIndexInformer) error {
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: h.deleted}); err != nil {
		return err
	}
	_, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if n, ok := kube.Deleted(obj).(*v1.Node); ok {
			h.nodeGone(n.Name)
		}
	}})
	return err
}

// deleted starts a hold for a pod delete event's object. The queueing hint
// of the same event calls it too: kube-scheduler's own handler may retry a
// waiting pod before this handler has run, and the hint runs first.
func (h *holds) deleted(obj any) {
	if h == nil {
		return
	}
	_, tombstone := obj.(cache.DeletedFinalStateUnknown)
	pod, ok := kube.Deleted(obj).(*v1.Pod)
	if !ok {
		return
	}
	d := underlay.DeletedPod(pod, tombstone)
	var drawn int64
	if h.drawsAll != nil && h.drawsAll() {
		// Its charge on a node that draws all: the hold is charged by
		// the node's draws (chargeOn).
		drawn = underlay.Drawn(d.Need, underlay.PodNetwork(pod))
	}
	charged := d
	charged.Need += drawn
	hold := underlay.HoldAfterDelete(charged)
	if hold <= 0 {
		return
	}
	h.mu.Lock()
	if _, dup := h.pods[pod.UID]; dup {
		h.mu.Unlock()
		return
	}
	h.pods[pod.UID] = heldIPs{node: d.NodeName, need: d.Need, drawn: drawn}
	h.byNode[d.NodeName] += d.Need
	if drawn != 0 {
		h.drawnByNode[d.NodeName] += drawn
	}
	h.mu.Unlock()
	klog.V(2).InfoS("Holding the underlay IPs of a force-deleted pod until its node can have released them",
		"pod", klog.KObj(pod), "node", d.NodeName, "ips", d.Need, "hold", hold)
	uid := pod.UID
	h.after(hold, func() { h.end(uid) })
}

// on is what holds charge to node when it does not draw all: the held
// pods' needs.
func (h *holds) on(node string) int64 {
	return h.chargeOn(node, underlay.Capacity{})
}

// chargeOn is what holds charge to node of capacity c: each held pod's
// charge there (underlay.Charge), its need plus, when the node draws all,
// its drawn.
func (h *holds) chargeOn(node string, c underlay.Capacity) int64 {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.DrawsAll {
		return h.byNode[node] + h.drawnByNode[node]
	}
	return h.byNode[node]
}

// turnedAway notes a pod that Filter rejected on a node a hold made full.
func (h *holds) turnedAway(pod *v1.Pod) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.waiting[pod.Namespace+"/"+pod.Name] = pod
	h.mu.Unlock()
}

// end ends uid's hold and activates the pods holds turned away.
func (h *holds) end(uid types.UID) {
	h.mu.Lock()
	p, ok := h.pods[uid]
	if ok {
		delete(h.pods, uid)
		h.release(p)
	}
	h.mu.Unlock()
	if ok {
		h.wake()
	}
}

// nodeGone ends the holds on a deleted node: its pods' IPs went with it.
func (h *holds) nodeGone(node string) {
	h.mu.Lock()
	for uid, p := range h.pods {
		if p.node == node {
			delete(h.pods, uid)
			h.release(p)
		}
	}
	h.mu.Unlock()
}

// release takes p off its node; callers hold mu.
func (h *holds) release(p heldIPs) {
	if h.byNode[p.node] -= p.need; h.byNode[p.node] <= 0 {
		delete(h.byNode, p.node)
	}
	if h.drawnByNode[p.node] -= p.drawn; h.drawnByNode[p.node] <= 0 {
		delete(h.drawnByNode, p.node)
	}
}

// wake activates every pod a hold turned away: any of them may fit now.
func (h *holds) wake() {
	h.mu.Lock()
	waiting := h.waiting
	h.waiting = map[string]*v1.Pod{}
	h.mu.Unlock()
	if len(waiting) > 0 && h.activate != nil {
		h.activate(waiting)
	}
}

// newHoldsFor builds the holds of a plugin from the framework handle: the
// scheduler's own pod and node informers and its Activate. A handle
// without informers (unit tests) gives nil: no holds.
func newHoldsFor(fh fwk.Handle, drawsAll func() bool) (*holds, error) {
	if fh == nil || fh.SharedInformerFactory() == nil {
		return nil, nil
	}
	logger := klog.Background().WithName(Name)
	h := newHolds(func(pods map[string]*v1.Pod) { fh.Activate(logger, pods) })
	h.drawsAll = drawsAll
	f := fh.SharedInformerFactory()
	if err := h.watch(f.Core().V1().Pods().Informer(), f.Core().V1().Nodes().Informer()); err != nil {
		return nil, err
	}
	return h, nil
}
