package soak

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// The invariants, in the order the report lists them.
const (
	OverCapacity   = "no node over capacity"
	ViewDrift      = "capscale's view equals the apiserver's"
	ReservationSet = "reservations released once the bind is done"
	WaitingSet     = "waiting set no larger than the Pending pods"
	WaitWithRoom   = "no pod waits 5 s once a fitting IP is free"
	RequeueBound   = "requeue writes within their bound"
	MetricFresh    = "HPA metrics fresh or an honest error"
)

// Invariants lists them all.
var Invariants = []string{OverCapacity, ViewDrift, ReservationSet, WaitingSet, WaitWithRoom, RequeueBound, MetricFresh}

// Bounds are the tolerances the invariants allow, each for a reason the
// docs give.
type Bounds struct {
	// BindGrace: a pod first seen bound this soon after its node's capacity
	// was lowered was placed on the old capacity by a scheduler whose cache
	// had not seen the change yet (one informer lag).
	BindGrace time.Duration
	// Lag: how long capscale's view or the waiting set may trail the
	// apiserver (one informer lag plus a sample).
	Lag time.Duration
	// WaitingLag: how long the waiting set may keep a pod deleted while
	// pending: the extender's PendingGrace (2 s, it looks for the pod
	// among the bound ones first) plus Lag.
	WaitingLag time.Duration
	// ReservationLag: how long a reservation may outlive its pod's bind or
	// deletion when the informer does not settle it: the reconciler's grace
	// and interval (5 s + 2 s, docs/extender-mode.md) plus Lag.
	ReservationLag time.Duration
	// MaxWait: how long a pod may stay Pending while an IP it fits is free
	// (5 s, issue 30) plus a sample interval.
	MaxWait time.Duration
	// Recovery: after a fault ends, how long pods may wait and views trail
	// while the restarted process resyncs.
	Recovery time.Duration
	// RequeueQPS and RequeueBurst are the extender's --requeue-qps and its
	// burst; RequeuePerIP the writes one freed IP may cause
	// (docs/failure-and-recovery.md: at most 4).
	RequeueQPS, RequeueBurst, RequeuePerIP float64
}

// DefaultBounds are the documented ones.
var DefaultBounds = Bounds{BindGrace: 2 * time.Second, Lag: 3 * time.Second, WaitingLag: 5 * time.Second, ReservationLag: 10 * time.Second, MaxWait: 6 * time.Second,
	Recovery: 20 * time.Second, RequeueQPS: 20, RequeueBurst: 20, RequeuePerIP: 4}

// Violation is one invariant broken at one sample.
type Violation struct {
	At        time.Time
	Invariant string
	Detail    string
	// Phase places it among the faults: during one, how long after the
	// last one ended, or before any (CI prints the violations, not the
	// soak's log of faults).
	Phase string
}

func (v Violation) String() string {
	s := fmt.Sprintf("%s %s: %s", v.At.Format(time.RFC3339), v.Invariant, v.Detail)
	if v.Phase != "" {
		s += " [" + v.Phase + "]"
	}
	return s
}

// Checker keeps what the invariants need across samples. It does no I/O.
type Checker struct {
	b Bounds
	// drift: node -> when its view first differed (with that apiserver value).
	drift map[string]driftStart
	// fits: pending pod UID -> since when some node had room for it.
	fits map[string]time.Time
	// fitsAttempts is kube-scheduler's attempt counter when each of fits
	// began (absent: not read then).
	fitsAttempts map[string]float64
	// faultEnd: when the last fault ended (zero: none yet); lastFault its
	// name, or the one in progress.
	faultEnd  time.Time
	inFault   bool
	lastFault string
	// pendingAt: underlay pod UID -> the last time it was seen Pending,
	// kept for WaitingLag; waiting, the last sample's waiting set, checked
	// at the next sample.
	pendingAt map[string]time.Time
	waiting   *counted
	// writes: requeue writes summed across extender restarts.
	writes         counter
	reportedWrites float64
	windowStart    time.Time
	windowWrites   float64
	// overSeen: node -> the bind last reported over capacity.
	overSeen map[string]time.Time
	// Counts per invariant, and the samples checked.
	Counts  map[string]int
	Samples int
}

type counted struct {
	at time.Time
	n  int
}

type driftStart struct {
	since    time.Time
	apiValue int64
}

// NewChecker returns a checker with bounds b.
func NewChecker(b Bounds) *Checker {
	return &Checker{b: b, overSeen: map[string]time.Time{}, drift: map[string]driftStart{}, fits: map[string]time.Time{}, fitsAttempts: map[string]float64{}, pendingAt: map[string]time.Time{}, Counts: map[string]int{}}
}

// Observe checks one sample and returns what it breaks.
func (c *Checker) Observe(s Sample) []Violation {
	c.Samples++
	var out []Violation
	switch {
	case s.Fault != "":
		c.inFault, c.lastFault = true, s.Fault
	case c.inFault:
		c.inFault, c.faultEnd = false, s.At
	}
	phase := c.phase(s.At)
	add := func(inv, format string, args ...any) {
		c.Counts[inv]++
		out = append(out, Violation{At: s.At, Invariant: inv, Detail: fmt.Sprintf(format, args...), Phase: phase})
	}
	settled := !c.inFault && (c.faultEnd.IsZero() || s.At.Sub(c.faultEnd) >= c.b.Recovery)

	for _, n := range s.Nodes {
		// A node may be over a capacity lowered under its pods; only a pod
		// bound after the scheduler could know of the change breaks the
		// rule. Each such bind is one violation, however many samples see it.
		limit := n.Capacity
		if n.Enforced != nil {
			limit = *n.Enforced
		}
		if n.Used > limit && n.LastBound.After(n.Lowered.Add(c.b.BindGrace)) && !c.overSeen[n.Name].Equal(n.LastBound) {
			c.overSeen[n.Name] = n.LastBound
			since := "its capacity never lowered in the run"
			if !n.Lowered.IsZero() {
				since = fmt.Sprintf("%s after its capacity became %d", n.LastBound.Sub(n.Lowered).Round(time.Millisecond), limit)
			}
			add(OverCapacity, "%s holds %d IPs of %d; a pod was bound to it at %s, %s",
				n.Name, n.Used, limit, n.LastBound.Format("15:04:05.000"), since)
		}
	}
	c.checkView(s, settled, add)
	if settled {
		for _, r := range s.Reservations {
			if r.BoundFor > c.b.ReservationLag || r.GoneFor > c.b.ReservationLag {
				add(ReservationSet, "pod %s still reserved, bound for %s, gone for %s", r.UID, r.BoundFor, r.GoneFor)
			}
		}
	}
	// The waiting set follows its own watch of pending pods: compare it
	// with the distinct pods Pending at any time from WaitingLag before it
	// up to the next sample, whose list holds the pods created while this
	// one was read (the soak read 184 in the set against 183 listed a
	// moment before, the set growing 15 a second). Distinct pods, not the
	// longest list: a pod deleted while pending stays in the set for
	// PendingGrace while new ones join it, and a pod may be created and
	// deleted between two samples (CI saw 153 in the set against at most
	// 152 in any list).
	for _, p := range s.Pending {
		c.pendingAt[p.UID] = s.At
	}
	for _, l := range s.LeftPending {
		if l.At.After(c.pendingAt[l.UID]) {
			c.pendingAt[l.UID] = l.At
		}
	}
	if v, ok := c.checkWaiting(s.At); !ok {
		out = append(out, v)
	}
	c.waiting = nil
	if settled && s.WaitingPods != nil {
		c.waiting = &counted{s.At, int(*s.WaitingPods)}
	}
	c.checkWaits(s, settled, add)
	c.checkRequeue(s, add)
	for _, m := range s.Metrics {
		if m.Err == "" && !contains(m.Expected, m.Value) {
			add(MetricFresh, "%s answered %v, the source held %v in the freshness window", m.Name, m.Value, m.Expected)
		}
	}
	return out
}

// phase says where now falls among the faults.
func (c *Checker) phase(now time.Time) string {
	switch {
	case c.inFault:
		return "during " + c.lastFault
	case c.lastFault == "":
		return "before any fault"
	}
	return fmt.Sprintf("%s after %s ended", now.Sub(c.faultEnd).Round(100*time.Millisecond), c.lastFault)
}

// checkWaiting checks the previous sample's waiting set against the
// distinct pods Pending from WaitingLag before it up to now, then forgets
// the pods that no waiting set from now on can still count.
func (c *Checker) checkWaiting(now time.Time) (Violation, bool) {
	defer func() {
		for uid, at := range c.pendingAt {
			if now.Sub(at) > c.b.WaitingLag {
				delete(c.pendingAt, uid)
			}
		}
	}()
	if c.waiting == nil {
		return Violation{}, true
	}
	w := *c.waiting
	limit := 0
	for _, at := range c.pendingAt {
		if w.at.Sub(at) <= c.b.WaitingLag {
			limit++
		}
	}
	if w.n <= limit {
		return Violation{}, true
	}
	c.Counts[WaitingSet]++
	return Violation{At: w.at, Invariant: WaitingSet,
		Detail: fmt.Sprintf("%d pods in the waiting set, %d distinct Pending underlay pods from %s before to the next sample", w.n, limit, c.b.WaitingLag)}, false
}

// Close checks what waits for a later sample: the last waiting set,
// against the Pending pods seen up to it.
func (c *Checker) Close() []Violation {
	now := time.Time{}
	if c.waiting != nil {
		now = c.waiting.at
	}
	v, ok := c.checkWaiting(now)
	c.waiting = nil
	if ok {
		return nil
	}
	return []Violation{v}
}

// checkView: a node whose view differs from the apiserver, with the
// apiserver's value unchanged, for longer than the lag.
func (c *Checker) checkView(s Sample, settled bool, add func(string, string, ...any)) {
	if s.View == "" {
		return
	}
	seen := map[string]bool{}
	for _, n := range s.Nodes {
		want := n.Used
		if s.View == "published" && !n.Invalid {
			want = n.Capacity
		}
		seen[n.Name] = true
		if n.View != nil && *n.View == want {
			delete(c.drift, n.Name)
			continue
		}
		d, ok := c.drift[n.Name]
		if !ok || d.apiValue != want || !settled {
			c.drift[n.Name] = driftStart{since: s.At, apiValue: want}
			continue
		}
		if s.At.Sub(d.since) > c.b.Lag {
			got := "nothing"
			if n.View != nil {
				got = fmt.Sprint(*n.View)
			}
			add(ViewDrift, "%s: capscale's %s says %s, the apiserver %d, for %s", n.Name, s.View, got, want, s.At.Sub(d.since).Round(time.Millisecond))
		}
	}
	for name := range c.drift {
		if !seen[name] {
			delete(c.drift, name)
		}
	}
}

// checkWaits: a Pending pod that some schedulable node has had room for,
// continuously, for longer than MaxWait.
func (c *Checker) checkWaits(s Sample, settled bool, add func(string, string, ...any)) {
	var room []int64
	for _, n := range s.Nodes {
		if n.Schedulable && n.Capacity > n.Used {
			room = append(room, n.Capacity-n.Used)
		}
	}
	sort.Slice(room, func(i, j int) bool { return room[i] > room[j] })
	most := int64(0)
	if len(room) > 0 {
		most = room[0]
	}
	// Many Pending pods may fit one free IP, but only one can take it: the
	// free room, spent smallest need first, is what must not go unused.
	pending := append([]Pending(nil), s.Pending...)
	sort.Slice(pending, func(i, j int) bool { return pending[i].Need < pending[j].Need })
	budget := int64(0)
	for _, r := range room {
		budget += r
	}
	live := map[string]bool{}
	for _, p := range pending {
		if !settled || p.Need > most || p.Need > budget {
			continue
		}
		budget -= p.Need
		live[p.UID] = true
		since, ok := c.fits[p.UID]
		if !ok {
			c.startWait(p.UID, s)
			continue
		}
		if s.At.Sub(since) > c.b.MaxWait {
			add(WaitWithRoom, "pod %s %s (needs %d, created %s before) Pending for %s while a node had %d IPs free%s", p.Name, p.UID, p.Need, s.At.Sub(p.Created).Round(time.Second), s.At.Sub(since).Round(time.Millisecond), most, c.attemptsSince(p.UID, s))
			c.startWait(p.UID, s) // one violation per MaxWait, not per sample
		}
	}
	for uid := range c.fits {
		if !live[uid] {
			delete(c.fits, uid)
			delete(c.fitsAttempts, uid)
		}
	}
}

// startWait starts a pod's wait at s, with the scheduler's attempts then.
func (c *Checker) startWait(uid string, s Sample) {
	c.fits[uid] = s.At
	delete(c.fitsAttempts, uid)
	if s.SchedulerAttempts != nil {
		c.fitsAttempts[uid] = *s.SchedulerAttempts
	}
}

// attemptsSince says how many scheduling attempts kube-scheduler made
// during a pod's wait: a busy scheduler means the pod waited in its queue,
// an idle one that nothing requeued it. Empty when either count is missing
// or the counter began again (the scheduler restarted).
func (c *Checker) attemptsSince(uid string, s Sample) string {
	start, ok := c.fitsAttempts[uid]
	if !ok || s.SchedulerAttempts == nil || *s.SchedulerAttempts < start {
		return ""
	}
	return fmt.Sprintf("; kube-scheduler made %.0f scheduling attempts meanwhile", *s.SchedulerAttempts-start)
}

// counter sums a cumulative counter read now and then across restarts of
// its process (a reading below the last: it began again at 0).
type counter struct {
	last, total float64
	seen        bool
}

// add takes a reading and returns the rise since the last one (0 for the
// first).
func (c *counter) add(v float64) float64 {
	d := 0.0
	switch {
	case !c.seen:
	case v >= c.last:
		d = v - c.last
	default:
		d = v
	}
	c.total += d
	c.last, c.seen = v, true
	return d
}

// checkRequeue: the writes over any second stay within the token bucket,
// and all of them within RequeuePerIP per freed IP.
func (c *Checker) checkRequeue(s Sample, add func(string, string, ...any)) {
	if s.RequeueWrites == nil {
		return
	}
	if !c.writes.seen {
		c.windowStart = s.At
	}
	c.windowWrites += c.writes.add(*s.RequeueWrites)
	if dt := s.At.Sub(c.windowStart).Seconds(); dt >= 10 {
		if limit := c.b.RequeueQPS*dt + c.b.RequeueBurst; c.windowWrites > limit {
			add(RequeueBound, "%v writes in %.0f s, above --requeue-qps' %v", c.windowWrites, dt, math.Floor(limit))
		}
		c.windowStart, c.windowWrites = s.At, 0
	}
	if limit := c.b.RequeuePerIP*float64(s.FreedIPs) + c.b.RequeueBurst; c.writes.total > limit && c.writes.total > c.reportedWrites {
		// Once per new excess, not at every later sample.
		c.reportedWrites = c.writes.total
		add(RequeueBound, "%v writes for %d IPs freed, above %v per IP", c.writes.total, s.FreedIPs, c.b.RequeuePerIP)
	}
}

func contains(xs []float64, v float64) bool {
	for _, x := range xs {
		if math.Abs(x-v) <= 1e-9*max(1, math.Abs(x)) {
			return true
		}
	}
	return false
}
