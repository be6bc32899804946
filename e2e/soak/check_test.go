package soak

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/internal/underlay"
)

var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func i64(v int64) *int64     { return &v }
func f64(v float64) *float64 { return &v }

// run feeds samples to a checker with the default bounds and returns the
// invariants broken, in order.
func run(samples ...Sample) []string {
	c := NewChecker(DefaultBounds)
	var out []string
	for _, s := range samples {
		for _, v := range c.Observe(s) {
			out = append(out, v.Invariant)
		}
	}
	for _, v := range c.Close() {
		out = append(out, v.Invariant)
	}
	return out
}

func node(name string, capacity, used int64) Node {
	return Node{Name: name, Capacity: capacity, Used: used, Schedulable: true}
}

// TestEachInvariantFails: every invariant, on a recorded sample that
// breaks it, and on its neighbour that does not.
func TestEachInvariantFails(t *testing.T) {
	over := node("a", 3, 4)
	over.Lowered, over.LastBound = at(0), at(5)
	lowered := node("a", 3, 4)
	lowered.Lowered, lowered.LastBound = at(5), at(4)
	racing := node("a", 3, 4)
	racing.Lowered, racing.LastBound = at(5), at(6) // within BindGrace

	// The annotation says 1, the publisher still says 10 (it was being
	// restarted): kube-scheduler rightly bound the fifth pod.
	notYet := node("a", 1, 5)
	notYet.Enforced, notYet.LastBound = i64(10), at(5)
	overPublished := node("a", 10, 5)
	overPublished.Enforced, overPublished.Lowered, overPublished.LastBound = i64(4), at(0), at(5)
	viewed := func(view, used int64) Sample {
		n := node("a", 10, used)
		n.View = i64(view)
		return Sample{View: "ledger", Nodes: []Node{n}}
	}
	published := func(view int64) Sample {
		n := node("a", 10, 2)
		n.View = i64(view)
		return Sample{View: "published", Nodes: []Node{n}}
	}
	invalidPublished := func(view int64) Sample {
		n := node("a", 0, 2)
		n.Invalid, n.View = true, i64(view)
		return Sample{View: "published", Nodes: []Node{n}}
	}
	full := Sample{Nodes: []Node{node("a", 2, 2)}, Pending: []Pending{{UID: "p", Need: 1}}}
	room := Sample{Nodes: []Node{node("a", 2, 1)}, Pending: []Pending{{UID: "p", Need: 1}}}
	crowd := Sample{Nodes: []Node{node("a", 2, 1)}, Pending: []Pending{{UID: "p", Need: 2}, {UID: "q", Need: 2}}}

	tests := []struct {
		name    string
		samples []Sample
		want    string // "" for none
	}{
		{"bound over capacity", []Sample{{At: at(6), Nodes: []Node{over}}}, OverCapacity},
		{"capacity lowered under its pods", []Sample{{At: at(6), Nodes: []Node{lowered}}}, ""},
		{"bound within one informer lag of the change", []Sample{{At: at(7), Nodes: []Node{racing}}}, ""},
		{"native: annotation lowered, not yet published", []Sample{{At: at(7), View: "published", Nodes: []Node{notYet}}}, ""},
		{"native: bound over the published capacity", []Sample{{At: at(7), View: "published", Nodes: []Node{overPublished}}}, OverCapacity},

		{"ledger trails for one lag", []Sample{withAt(viewed(1, 2), 0), withAt(viewed(1, 2), 2)}, ""},
		{"ledger drifts", []Sample{withAt(viewed(1, 2), 0), withAt(viewed(1, 2), 2), withAt(viewed(1, 2), 4)}, ViewDrift},
		{"ledger follows a moving apiserver", []Sample{withAt(viewed(1, 2), 0), withAt(viewed(2, 3), 2), withAt(viewed(3, 4), 4)}, ""},
		{"published capacity drifts", []Sample{withAt(published(9), 0), withAt(published(9), 4)}, ViewDrift},
		{"published capacity right", []Sample{withAt(published(10), 0), withAt(published(10), 4)}, ""},
		{"invalid capacity publishes the IPs in use", []Sample{withAt(invalidPublished(2), 0), withAt(invalidPublished(2), 4)}, ""},
		{"invalid capacity publishing 0 under running pods", []Sample{withAt(invalidPublished(0), 0), withAt(invalidPublished(0), 4)}, ViewDrift},

		{"reservation of a pod bound long ago", []Sample{{At: at(30), Reservations: []Reservation{{UID: "p", BoundFor: 12 * time.Second}}}}, ReservationSet},
		{"reservation of a pod gone", []Sample{{At: at(30), Reservations: []Reservation{{UID: "p", GoneFor: 15 * time.Second}}}}, ReservationSet},
		{"reservation of a pod gone, within the reconciler's period", []Sample{{At: at(30), Reservations: []Reservation{{UID: "p", GoneFor: 8 * time.Second}}}}, ""},
		{"reservation of a bind in flight", []Sample{{At: at(30), Reservations: []Reservation{{UID: "p"}}}}, ""},

		{"waiting set larger than Pending", []Sample{{At: at(1), WaitingPods: f64(3), Pending: []Pending{{UID: "p", Need: 1}}}}, WaitingSet},
		{"waiting set trails a deletion by one lag", []Sample{{At: at(0), WaitingPods: f64(2), Pending: pend("a", "b")}, {At: at(1), WaitingPods: f64(2), Pending: pend("a")}, {At: at(2.5), WaitingPods: f64(2), Pending: pend("a")}}, ""},
		{"waiting set counts pods created while the Pending pods were listed", []Sample{{At: at(0), WaitingPods: f64(3), Pending: pend("a", "b")}, {At: at(1), WaitingPods: f64(4), Pending: pend("a", "b", "c", "d")}}, ""},
		{"waiting set holds a pod deleted while pending beside a new one", []Sample{{At: at(0), WaitingPods: f64(2), Pending: pend("a", "b")}, {At: at(1), WaitingPods: f64(3), Pending: pend("b", "c")}, {At: at(2), WaitingPods: f64(2), Pending: pend("b", "c")}}, ""},
		{"waiting set holds a pod that lived between two samples", []Sample{{At: at(0), WaitingPods: f64(1), Pending: pend("a")}, {At: at(2), WaitingPods: f64(2), Pending: pend("a"), LeftPending: []Left{{UID: "b", At: at(1)}}}, {At: at(4), WaitingPods: f64(1), Pending: pend("a")}}, ""},
		{"waiting set holds a pod that left Pending more than its lag before", []Sample{{At: at(10), WaitingPods: f64(2), Pending: pend("a"), LeftPending: []Left{{UID: "b", At: at(2)}}}, {At: at(12), WaitingPods: f64(1), Pending: pend("a")}}, WaitingSet},
		{"waiting set trails a deletion by more than its lag", []Sample{{At: at(0), WaitingPods: f64(2), Pending: pend("a", "b")}, {At: at(1), WaitingPods: f64(2), Pending: pend("a")}, {At: at(6), WaitingPods: f64(2), Pending: pend("a")}}, WaitingSet},
		{"waiting set larger than the distinct pods Pending in its window", []Sample{{At: at(0), WaitingPods: f64(2), Pending: pend("a", "b")}, {At: at(1), WaitingPods: f64(4), Pending: pend("b", "c")}, {At: at(2), WaitingPods: f64(2), Pending: pend("b", "c")}}, WaitingSet},

		{"waits 7 s with an IP free", []Sample{withAt(room, 0), withAt(room, 3), withAt(room, 7)}, WaitWithRoom},
		{"waits on a full node", []Sample{withAt(full, 0), withAt(full, 7)}, ""},
		{"two pods, one free IP: neither fits", []Sample{withAt(crowd, 0), withAt(crowd, 7)}, ""},
		{"waits with room during a fault", []Sample{withFault(room, 0), withFault(room, 7)}, ""},
		{"waits with room within Recovery of a fault", []Sample{withFault(room, 0), withAt(room, 1), withAt(room, 8)}, ""},

		{"requeue writes above the token bucket", []Sample{{At: at(0), RequeueWrites: f64(0), FreedIPs: 1000}, {At: at(10), RequeueWrites: f64(400), FreedIPs: 1000}}, RequeueBound},
		{"requeue writes above 4 per freed IP", []Sample{{At: at(0), RequeueWrites: f64(0), FreedIPs: 1}, {At: at(5), RequeueWrites: f64(40), FreedIPs: 1}}, RequeueBound},
		{"requeue counter reset by a restart", []Sample{{At: at(0), RequeueWrites: f64(50), FreedIPs: 30}, {At: at(5), RequeueWrites: f64(3), FreedIPs: 31}}, ""},

		{"a stale metric", []Sample{{At: at(0), Metrics: []Metric{{Name: "load", Value: 0.3, Expected: []float64{0.9}}}}}, MetricFresh},
		{"a 0 for a source that is down", []Sample{{At: at(0), Metrics: []Metric{{Name: "load", Value: 0, Expected: []float64{0.9}}}}}, MetricFresh},
		{"an honest error", []Sample{{At: at(0), Metrics: []Metric{{Name: "load", Err: "503: source unreachable", Expected: []float64{0.9}}}}}, ""},
		{"a fresh value", []Sample{{At: at(0), Metrics: []Metric{{Name: "load", Value: 0.9, Expected: []float64{0.2, 0.9}}}}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(run(tc.samples...), ", ")
			if got != tc.want {
				t.Errorf("broken: %q, want %q", got, tc.want)
			}
		})
	}
}

func withAt(s Sample, sec float64) Sample { s.At = at(sec); return s }

func withFault(s Sample, sec float64) Sample {
	s.At, s.Fault = at(sec), "kill extender"
	return s
}

func TestSecondHalfSlope(t *testing.T) {
	var flat, growing []Point
	for i := range 120 {
		at := t0.Add(time.Duration(i) * time.Minute)
		noise := float64((i*7)%5) - 2
		// a warm-up in the first half must not read as growth
		warm := 0.0
		if i < 20 {
			warm = float64(i) * 5
		}
		flat = append(flat, Point{at, 100 + warm + noise})
		growing = append(growing, Point{at, 100 + float64(i) + noise})
	}
	if s := SecondHalfSlope(flat); !s.Flat(0) || s.N != 60 {
		t.Errorf("flat: %+v, want an interval holding 0 over the second hour", s)
	}
	if s := SecondHalfSlope(growing); s.Flat(0) || math.Abs(s.PerHour-60) > 1 {
		t.Errorf("growing by 1 a minute: %+v, want about 60 per hour", s)
	}
	if s := SecondHalfSlope(growing[:2]); !math.IsNaN(s.PerHour) {
		t.Errorf("two points: %+v, want NaN", s)
	}
}

// TestOverCapacityOncePerBind: a node left over capacity by one bad bind
// is one violation, not one per sample that sees it.
func TestOverCapacityOncePerBind(t *testing.T) {
	n := node("a", 1, 3)
	n.Lowered, n.LastBound = at(0), at(5)
	later := n
	later.LastBound = at(9)
	if got := run(Sample{At: at(6), Nodes: []Node{n}}, Sample{At: at(7), Nodes: []Node{n}}, Sample{At: at(10), Nodes: []Node{later}}); len(got) != 2 {
		t.Errorf("violations %v, want two: one per bind", got)
	}
}

// TestViolationSaysThePhase: a violation says which fault was in
// progress, or how long after the last one it came, and an over-capacity
// bind on a node never lowered says so rather than a time since the zero
// time.
func TestViolationSaysThePhase(t *testing.T) {
	c := NewChecker(DefaultBounds)
	over := func(bound float64) Node {
		n := node("a", 10, 11)
		n.LastBound = at(bound)
		return n
	}
	var got []string
	for _, s := range []Sample{
		{At: at(1), Nodes: []Node{over(1)}},
		{At: at(2), Fault: "restart kube-apiserver", Nodes: []Node{over(2)}},
		{At: at(3), Nodes: []Node{over(3)}},
		{At: at(5.5), Nodes: []Node{over(5.5)}},
	} {
		for _, v := range c.Observe(s) {
			got = append(got, v.String())
		}
	}
	want := []string{"[before any fault]", "[during restart kube-apiserver]", "[0s after restart kube-apiserver ended]", "[2.5s after restart kube-apiserver ended]"}
	if len(got) != len(want) {
		t.Fatalf("violations %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(got[i], w) || !strings.Contains(got[i], "its capacity never lowered in the run") {
			t.Errorf("violation %d: %q, want it to end %q and say the capacity was never lowered", i, got[i], w)
		}
	}
}

// TestLoadExpected: while the source is up, the values of the last poll
// interval; while down, the last good one until maxAge, then nothing but
// an error is fresh.
func TestLoadExpected(t *testing.T) {
	l := &load{interval: 2 * time.Second, maxAge: 10 * time.Second}
	l.history = []held{{since: at(0), value: 0.3}, {since: at(10), value: 0.7}, {since: at(20), value: 0.7, down: true}}
	for _, tc := range []struct {
		now  float64
		want []float64
	}{
		{5, []float64{0.3}},
		{11, []float64{0.3, 0.7}},
		{25, []float64{0.7}},
		{40, nil},
	} {
		if got := l.expected(at(tc.now), 3*time.Second); !slices.Equal(got, tc.want) {
			t.Errorf("at %vs: %v, want %v", tc.now, got, tc.want)
		}
	}
}

// pend lists Pending pods by UID, each needing one IP.
func pend(uids ...string) []Pending {
	out := make([]Pending, len(uids))
	for i, uid := range uids {
		out[i] = Pending{UID: uid, Need: 1}
	}
	return out
}

// The native soak starts judging once every node's first capacity is
// published: a node unpublished, or published other than its rule, waits;
// an invalid node counts once anything is published (its IPs in use).
func TestUnpublished(t *testing.T) {
	o := &observer{
		capacity: map[string]int64{"a": 10, "b": 3, "c": 0, "d": 10},
		pub:      map[string]int64{"a": 10, "b": 10, "c": 2, "d": -1},
		invalid:  map[string]bool{"c": true},
	}
	if got := o.unpublished(); got != 2 {
		t.Errorf("unpublished = %d, want 2 (b published 10 for 3, d none)", got)
	}
	o.pub["b"], o.pub["d"] = 3, 10
	if got := o.unpublished(); got != 0 {
		t.Errorf("unpublished = %d, want 0", got)
	}
	delete(o.pub, "a")
	if got := o.unpublished(); got != 1 {
		t.Errorf("a node never seen published: unpublished = %d, want 1", got)
	}
}

// The observer notes a pod that stops being Pending, bound or deleted, so
// that a pod living between two samples still counts for the waiting set.
func TestLeftPending(t *testing.T) {
	ip := func(node string) *corev1.Pod {
		q := resource.MustParse("1")
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u"},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{underlay.Resource: q}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending}}
	}
	plain := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}
	for _, tc := range []struct {
		name     string
		was, now *corev1.Pod
		want     int
	}{
		{"created Pending", nil, ip(""), 0},
		{"bound", ip(""), ip("n"), 1},
		{"deleted while Pending", ip(""), nil, 1},
		{"deleted once bound", ip("n"), nil, 0},
		{"a pod needing no IP", plain, nil, 0},
	} {
		o := &observer{}
		o.leftPending(tc.was, tc.now)
		if len(o.left) != tc.want {
			t.Errorf("%s: %d noted, want %d", tc.name, len(o.left), tc.want)
		}
	}
}

// TestWaitNamesTheSchedulersAttempts: a wait's report says how many
// attempts kube-scheduler made meanwhile (busy: a queue; none: nothing
// requeued the pod), and says nothing when the count is missing or the
// counter began again.
func TestWaitNamesTheSchedulersAttempts(t *testing.T) {
	room := Sample{Nodes: []Node{node("a", 2, 1)}, Pending: []Pending{{UID: "p", Name: "soak/p", Need: 1}}}
	with := func(sec float64, attempts *float64) Sample {
		s := withAt(room, sec)
		s.SchedulerAttempts = attempts
		return s
	}
	for _, c := range []struct {
		name    string
		samples []Sample
		want    string
	}{
		{"busy", []Sample{with(0, f64(100)), with(3, f64(130)), with(7, f64(160))}, "kube-scheduler made 60 scheduling attempts meanwhile"},
		{"idle", []Sample{with(0, f64(100)), with(7, f64(100))}, "kube-scheduler made 0 scheduling attempts meanwhile"},
		{"not read at the start", []Sample{with(0, nil), with(7, f64(100))}, ""},
		{"scheduler restarted", []Sample{with(0, f64(100)), with(7, f64(4))}, ""},
	} {
		ch := NewChecker(DefaultBounds)
		var got []Violation
		for _, s := range c.samples {
			got = append(got, ch.Observe(s)...)
		}
		if len(got) != 1 || got[0].Invariant != WaitWithRoom {
			t.Fatalf("%s: got %v, want one %s", c.name, got, WaitWithRoom)
		}
		if c.want == "" && strings.Contains(got[0].Detail, "attempts") {
			t.Errorf("%s: %q names attempts it cannot know", c.name, got[0].Detail)
		}
		if c.want != "" && !strings.Contains(got[0].Detail, c.want) {
			t.Errorf("%s: %q, want it to say %q", c.name, got[0].Detail, c.want)
		}
	}
}
