package extender

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Waiting is the bookkeeping behind "a freed IP is reused at once".
//
// kube-scheduler registers no queueing hint for an extender's rejection: a
// pod the extender turned away retries on the next cluster event. When that
// event is the deletion of the pod that held the IP, the retry often reaches
// the extender before its own informer has seen the deletion, is rejected
// again, and then waits for the scheduler's periodic flush (up to five
// minutes). Waiting remembers the pods rejected for lack of IPs; once the
// ledger frees IPs, Next names a few of them, and the caller touches each
// pod (an update of the pending pod makes kube-scheduler requeue it) — so the
// retry happens after the ledger already counts the IPs as free.
//
// Writes are bounded: a release of n IPs earns n credits (one per IP, a pod
// spends its need) and at most triesPerFreedIP×n writes; a pod is touched at
// most once per release; the writer adds a rate limit on top. A release on
// a named node (FreedOn) wakes only the pods that may go there: under a
// busy pool, a pod that fits on one node is not retried for every other
// node's growth.
type Waiting struct {
	clock clock.PassiveClock
	// count mirrors len(pods) so that the filter's fit path skips the lock
	// when nothing waits.
	count atomic.Int64

	mu   sync.Mutex
	pods map[types.UID]*waiter
	// gen counts releases; a pod is touched at most once per gen.
	gen uint64
	// credit is IPs freed and not yet claimed by a touched pod; budget the
	// writes the current releases still allow.
	credit, budget int64
	// lastFreed is the time of the latest release, for the reuse histogram.
	lastFreed time.Time
	// wake tells the writer that Next may have work.
	wake chan struct{}
}

type waiter struct {
	namespace, name string
	priority        int32
	need            int64
	// since is the first rejection; last the latest one.
	since, last time.Time
	// touchedGen is the release during which the pod was last touched;
	// outstanding is true from that touch until its retry is decided.
	touchedGen  uint64
	touchedAt   time.Time
	outstanding bool
	// fits is set when a later filter found room: the pod no longer waits,
	// but stays known until it shows up bound, for the reuse histogram.
	fits bool
	// nodes are where the pod may go, when its latest filter saw so few
	// that they are all (maxReach); nil: anywhere. freedGen is the latest
	// release it may use: it is touched again only after a later one.
	nodes    []string
	freedGen uint64
}

const (
	// triesPerFreedIP bounds the writes one freed IP can cause when the
	// pods touched first cannot use it (another node's selector, say).
	triesPerFreedIP = 4
	// maxWaiting bounds the memory of the set.
	maxWaiting = 100000
	// waitingTTL forgets a pod nothing has reported on for this long (it
	// was deleted while pending, which the bound-pod informer does not see
	// and no touch found, or another scheduler took it).
	waitingTTL = 15 * time.Minute
	// outstandingTimeout returns a touched pod's credit when its retry never
	// reached the extender (an in-tree filter rejected it, or its backoff,
	// at most 10 s by default, is still running).
	outstandingTimeout = 15 * time.Second
	// maxReach bounds the nodes kept per pod. It is below kube-scheduler's
	// minFeasibleNodesToFind (100, v1.37.2 pkg/scheduler/schedule_one.go:57,
	// 866-892): a filter call with fewer names had every feasible node, not
	// a sample of them.
	maxReach = 16
)

// NewWaiting returns an empty set; clk defaults to the real clock.
func NewWaiting(clk clock.PassiveClock) *Waiting {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Waiting{clock: clk, pods: map[types.UID]*waiter{}, wake: make(chan struct{}, 1)}
}

// Wake is signalled when Next may have work.
func (w *Waiting) Wake() <-chan struct{} { return w.wake }

func (w *Waiting) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Touch names a pod to requeue.
type Touch struct {
	UID             types.UID
	Namespace, Name string
}

// Rejected records that filter found no node with room for the pod because
// IPs were exhausted. nodes are the nodes that filter was asked about, all
// that passed kube-scheduler's own filters: the pod waits for those alone
// when they are few (none: anywhere). A pod that was touched and is
// rejected again gives its credit back, so that another waiting pod may use
// the freed IPs.
func (w *Waiting) Rejected(uid types.UID, namespace, name string, priority int32, need int64, nodes ...string) {
	if uid == "" || w == nil {
		return
	}
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pods[uid]
	if p == nil {
		if len(w.pods) >= maxWaiting {
			return
		}
		// A release may have been counted between this pod's filter and
		// now: as before targeting, a new pod may take what credit is left.
		p = &waiter{namespace: namespace, name: name, since: now, freedGen: w.gen}
		w.pods[uid] = p
		w.count.Store(int64(len(w.pods)))
	}
	p.priority, p.need, p.last, p.fits = priority, need, now, false
	p.nodes = reach(nodes)
	w.giveBackLocked(p)
}

// reach is what a waiter keeps of the nodes its filter saw: a copy (the
// names may live in a request's buffer), or nil for anywhere.
func reach(nodes []string) []string {
	if len(nodes) == 0 || len(nodes) > maxReach {
		return nil
	}
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = strings.Clone(n)
	}
	return out
}

// mayUse: a release on node (anywhere if "") may let the pod fit.
func (p *waiter) mayUse(node string) bool {
	return node == "" || p.nodes == nil || slices.Contains(p.nodes, node)
}

// giveBackLocked returns the credit a touched pod took, when its touch did
// not place it; the write it cost stays spent, so that one freed IP never
// causes more than triesPerFreedIP writes.
func (w *Waiting) giveBackLocked(p *waiter) {
	if p.outstanding {
		p.outstanding = false
		w.credit += p.need
		w.signal()
	}
}

// Fits records that filter found room for a waiting pod: it is touched no
// more, and a touch that led here keeps its credit spent.
func (w *Waiting) Fits(uid types.UID) {
	if w == nil || w.count.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.pods[uid]; p != nil {
		p.fits, p.outstanding = true, false
	}
}

// Forget drops a pod: it was deleted or finished.
func (w *Waiting) Forget(uid types.UID) {
	if w == nil || w.count.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forgetLocked(uid)
}

// Gone drops a pod the requeuer found deleted, and gives back the credit its
// touch took, as a failed retry does: a pending pod is deleted unseen (the
// pod informer watches bound pods only), and the freed IPs must reach a pod
// that still waits.
func (w *Waiting) Gone(uid types.UID) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.pods[uid]; p != nil {
		w.giveBackLocked(p)
		w.forgetLocked(uid)
	}
}

func (w *Waiting) forgetLocked(uid types.UID) {
	if _, ok := w.pods[uid]; !ok {
		return
	}
	delete(w.pods, uid)
	w.count.Store(int64(len(w.pods)))
	if len(w.pods) == 0 {
		w.credit, w.budget = 0, 0
	}
}

// Bound drops a pod the informer shows bound and returns how long after the
// latest release it bound, when it was waiting at that release.
func (w *Waiting) Bound(uid types.UID) (sinceFreed time.Duration, ok bool) {
	if w == nil || w.count.Load() == 0 {
		return 0, false
	}
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pods[uid]
	if p == nil {
		return 0, false
	}
	w.forgetLocked(uid)
	if w.lastFreed.IsZero() || !p.since.Before(w.lastFreed) {
		return 0, false
	}
	return now.Sub(w.lastFreed), true
}

// Freed records that n IPs became free where the caller cannot say (a
// pod's deletion, expired reservations). It reports whether a pod waits
// that may use them, i.e. whether Next may now have work.
func (w *Waiting) Freed(n int64) bool { return w.FreedOn("", n) }

// FreedOn records that n IPs became free on node: only the pods that may
// go there are touched for them.
func (w *Waiting) FreedOn(node string, n int64) bool {
	if w == nil || n <= 0 {
		return false
	}
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastFreed = now
	if len(w.pods) == 0 {
		return false
	}
	w.gen++
	// More credit than the pods that may use it could claim only inflates
	// writes.
	var need, waiting int64
	for _, p := range w.pods {
		if p.fits {
			continue
		}
		if p.mayUse(node) {
			p.freedGen = w.gen
		}
		if p.touchedGen < p.freedGen {
			need += p.need
			waiting++
		}
	}
	if waiting == 0 {
		return false
	}
	w.credit = min(w.credit+n, need)
	w.budget = min(w.budget+triesPerFreedIP*n, triesPerFreedIP*waiting)
	w.signal()
	return true
}

// Next returns the pods to touch now, highest priority first, then the
// longest waiting, and marks them touched. It also forgets stale pods and
// returns the credit of touches whose retry never came back.
func (w *Waiting) Next() []Touch {
	if w == nil {
		return nil
	}
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	var eligible []*waiterRef
	for uid, p := range w.pods {
		if now.Sub(p.last) > waitingTTL {
			w.forgetLocked(uid)
			continue
		}
		if p.outstanding && now.Sub(p.touchedAt) > outstandingTimeout {
			p.outstanding = false
			w.credit += p.need
		}
		if !p.fits && !p.outstanding && p.touchedGen < p.freedGen {
			eligible = append(eligible, &waiterRef{uid, p})
		}
	}
	if w.credit <= 0 || w.budget <= 0 || len(eligible) == 0 {
		return nil
	}
	sort.Slice(eligible, func(i, j int) bool {
		a, b := eligible[i].w, eligible[j].w
		if a.priority != b.priority {
			return a.priority > b.priority
		}
		if !a.since.Equal(b.since) {
			return a.since.Before(b.since)
		}
		return eligible[i].uid < eligible[j].uid
	})
	var out []Touch
	for _, e := range eligible {
		if w.credit <= 0 || w.budget <= 0 {
			break
		}
		e.w.touchedGen, e.w.touchedAt, e.w.outstanding = w.gen, now, true
		w.credit -= max(e.w.need, 1)
		w.budget--
		out = append(out, Touch{UID: e.uid, Namespace: e.w.namespace, Name: e.w.name})
	}
	return out
}

// Outstanding reports whether a touched pod's retry is still awaited, so
// that the caller knows to call Next again after outstandingTimeout.
func (w *Waiting) Outstanding() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pods {
		if p.outstanding {
			return true
		}
	}
	return false
}

// Len is the number of waiting pods.
func (w *Waiting) Len() int {
	if w == nil {
		return 0
	}
	return int(w.count.Load())
}

type waiterRef struct {
	uid types.UID
	w   *waiter
}
