package soak

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/capscale/capscale/e2e/loadsource"
)

// load moves the load source's value and takes it down now and then, and
// keeps the history the freshness invariant needs.
type load struct {
	src *loadsource.Source
	// interval and maxAge are the adapter's for this source.
	interval, maxAge time.Duration

	mu      sync.Mutex
	history []held
}

// held is one value the source served from since (or was down from).
type held struct {
	since time.Time
	value float64
	down  bool
}

func newLoad(interval, maxAge time.Duration) *load {
	l := &load{src: &loadsource.Source{}, interval: interval, maxAge: maxAge}
	l.set(0.5, false)
	return l
}

func (l *load) set(v float64, down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.src.Set(v)
	l.src.SetDown(down)
	l.history = append(l.history, held{since: time.Now(), value: v, down: down})
}

// step moves the value at random; three steps in ten the source is down
// (15 s at a step a 5 s, longer than the adapter's maxAge of 10 s, so that
// the adapter must say so rather than serve the old value).
func (l *load) step(rng *rand.Rand, n int) {
	l.mu.Lock()
	cur := l.history[len(l.history)-1]
	l.mu.Unlock()
	if n%10 >= 7 {
		l.set(cur.value, true)
		return
	}
	l.set(float64(rng.IntN(90)+10)/100, false)
}

// expected is what a fresh answer at now may be: any value the source
// served within the adapter's poll interval plus lag; and, while the last
// good value is younger than maxAge, that value too (the adapter serves it
// on purpose, docs/metrics-adapter.md "Freshness").
func (l *load) expected(now time.Time, lag time.Duration) []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []float64
	window := now.Add(-(l.interval + lag))
	for i, h := range l.history {
		if h.since.After(now) {
			break
		}
		end := now
		if i+1 < len(l.history) {
			end = l.history[i+1].since
		}
		if h.down || end.Before(window) || slices.Contains(out, h.value) {
			continue
		}
		out = append(out, h.value)
	}
	// The last value served before now, if younger than maxAge plus a poll.
	for i := len(l.history) - 1; i >= 0; i-- {
		h := l.history[i]
		if h.down || h.since.After(now) {
			continue
		}
		end := now
		if i+1 < len(l.history) {
			end = l.history[i+1].since
		}
		if now.Sub(end) <= l.maxAge+l.interval+lag && !slices.Contains(out, h.value) {
			out = append(out, h.value)
		}
		break
	}
	return out
}
