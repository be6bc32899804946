package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capscale/capscale/e2e/plane"
)

// A churn round's second-by-second record beside its lags, to tell what a
// slow round shares with its slow changes: the machine's CPU (the plane,
// the bench and anything else on it), the hypervisor's steal, and etcd's
// compactions (kube-apiserver asks for one every 5 minutes).

type sample struct {
	at          time.Time
	busy, steal time.Duration // the machine's, all cores
	self        time.Duration // the bench's own CPU
	plane       time.Duration // every process of the plane, capscale's included
	etcd        etcdSample
	queue       queueSample
	work        time.Duration // workTime's, 0 if not read
}

// etcdSample is etcd's compactions so far, read from its /metrics.
type etcdSample struct{ compactions, compactionMs float64 }

// queueSample is capscale-controller's mirror queue: its depth now, and
// so far the time its Nodes waited in it and the time their syncs took,
// the patch included.
type queueSample struct{ depth, waitSum, waitCount, syncSum, syncCount float64 }

// timeline's samples are written by its goroutine alone and read once it
// has ended.
type timeline struct {
	samples []sample
	stop    context.CancelFunc
	done    chan struct{}
}

// startTimeline samples every second until stopTimeline.
func startTimeline(ctx context.Context, p *plane.Plane, controllerURL string) *timeline {
	ctx, cancel := context.WithCancel(ctx)
	t := &timeline{stop: cancel, done: make(chan struct{})}
	etcd := etcdMetricsURL(p)
	// A stopped capscale-controller (the IPAM-alone rounds) must not hold
	// the samples up.
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	go func() {
		defer close(t.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var last sample
		for {
			// A scrape that fails (capscale-controller stopped) keeps the
			// last values, so that its window reads 0, not a negative.
			s := sample{at: time.Now(), etcd: last.etcd, queue: last.queue}
			s.busy, s.steal, _ = machineCPU()
			s.work = workTime()
			s.self, _ = procCPU(os.Getpid())
			for _, d := range allCPU(p) {
				s.plane += d
			}
			if etcd != "" {
				if f, err := scrapeHTTP(ctx, hc, etcd); err == nil {
					const c = "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds"
					s.etcd = etcdSample{compactions: total(f.counts(c)), compactionMs: total(f.sums(c))}
				}
			}
			if f, err := scrapeHTTP(ctx, hc, controllerURL+"/metrics"); err == nil {
				const wait, synced = "capscale_controller_capacity_source_queue_wait_seconds", "capscale_controller_capacity_source_sync_duration_seconds"
				s.queue = queueSample{depth: total(f.gauges("capscale_controller_capacity_source_queue_depth")),
					waitSum: total(f.sums(wait)), waitCount: total(f.counts(wait)), syncSum: total(f.sums(synced)), syncCount: total(f.counts(synced))}
			}
			last = s
			t.samples = append(t.samples, s)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return t
}

// finish stops the sampling (once or more) and returns the samples.
func (t *timeline) finish() []sample {
	t.stop()
	<-t.done
	return t.samples
}

// etcdMetricsURL is the plane's etcd /metrics ("" if it cannot be told).
func etcdMetricsURL(p *plane.Plane) string {
	for _, proc := range p.Processes() {
		if proc.Name != "etcd" {
			continue
		}
		for _, a := range proc.Args {
			if url, ok := strings.CutPrefix(a, "--listen-client-urls="); ok {
				return url + "/metrics"
			}
		}
	}
	return ""
}

// machineCPU reads /proc/stat's first line: busy (user, nice, system,
// irq, softirq) and steal, summed over the cores.
func machineCPU() (busy, steal time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	v := make([]int64, 8)
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	ticks := func(n int64) time.Duration { return time.Duration(n) * time.Second / userHZ }
	// user nice system idle iowait irq softirq steal
	return ticks(v[0] + v[1] + v[2] + v[5] + v[6]), ticks(v[7]), nil
}

// seenAt is one awaited state: when it was seen, and its lag in ms.
type seenAt struct {
	at  time.Time
	lag float64
}

// windows prints the round in windows of w: per window the slowest lag
// seen in it and how many were over 1 s, the slowest delivery of the
// IPAM's writes to a watch of kube-apiserver's (the bench's own, as
// capscale-controller's), the probes' slowest, the mirror queue's deepest,
// its mean wait and mean sync, the machine's cores busy (the plane's, the
// bench's, and the rest), steal, etcd's compactions, and the mean CPU time
// of a fixed piece of work (workTime: a core slowed by its neighbours).
func windows(samples []sample, lags, delivered, binds []seenAt, w time.Duration) string {
	if len(samples) < 2 {
		return "—"
	}
	var parts []string
	start := samples[0].at
	for i := 0; i+1 < len(samples); {
		j := i + 1
		for j+1 < len(samples) && samples[j].at.Sub(samples[i].at) < w {
			j++
		}
		a, b := samples[i], samples[j]
		wall := b.at.Sub(a.at).Seconds()
		cores := func(d time.Duration) float64 { return d.Seconds() / wall }
		in := func(l seenAt) bool { return !l.at.Before(a.at) && l.at.Before(b.at) }
		worst, over, watch := 0.0, 0, 0.0
		for _, l := range lags {
			if in(l) {
				worst = max(worst, l.lag)
				if l.lag > 1000 {
					over++
				}
			}
		}
		for _, l := range delivered {
			if in(l) {
				watch = max(watch, l.lag)
			}
		}
		depth := 0.0
		for _, x := range samples[i : j+1] {
			depth = max(depth, x.queue.depth)
		}
		// The work timed at the window's samples after its first.
		work, works := time.Duration(0), 0
		for _, x := range samples[i+1 : j+1] {
			if x.work > 0 {
				work += x.work
				works++
			}
		}
		workUs := "—"
		if works > 0 {
			workUs = fmt.Sprintf("%.0f µs", float64(work.Microseconds())/float64(works))
		}
		meanMs := func(sum, count float64) float64 { return sum * 1000 / max(count, 1) }
		qa, qb := a.queue, b.queue
		queueWait, syncMean := meanMs(qb.waitSum-qa.waitSum, qb.waitCount-qa.waitCount), meanMs(qb.syncSum-qa.syncSum, qb.syncCount-qa.syncCount)
		probe := "—"
		for _, l := range binds {
			if in(l) {
				probe = fmt.Sprintf("%.0f", l.lag)
			}
		}
		busy, plane, self := cores(b.busy-a.busy), cores(b.plane-a.plane), cores(b.self-a.self)
		parts = append(parts, fmt.Sprintf("[%2.0f s: lag max %.0f ms, %d over 1 s, watch max %.0f ms, probe %s; queue max %.0f, wait mean %.0f ms, sync mean %.0f ms; cores: plane %.2f, bench %.2f, other %.2f, steal %.2f; compactions %.0f (%.0f ms); work %s]",
			a.at.Sub(start).Seconds(), worst, over, watch, probe, depth, queueWait, syncMean, plane, self, max(busy-plane-self, 0), cores(b.steal-a.steal),
			b.etcd.compactions-a.etcd.compactions, b.etcd.compactionMs-a.etcd.compactionMs, workUs))
		i = j
	}
	return strings.Join(parts, " ")
}

// delivery times the IPAM's writes to a watch of kube-apiserver's: from
// the write's return to its resourceVersion seen (0 if seen before).
type delivery struct {
	mu   sync.Mutex
	last map[string]string // by name: the newest resourceVersion seen
	want map[string]pendingChange
	lags []seenAt
}

func newDelivery() *delivery {
	return &delivery{last: map[string]string{}, want: map[string]pendingChange{}}
}

func (d *delivery) written(name, rv string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last[name] == rv {
		d.lags = append(d.lags, seenAt{at: time.Now()})
		return
	}
	d.want[name] = pendingChange{value: rv, at: time.Now()}
}

func (d *delivery) seen(name, rv string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last[name] = rv
	if w, ok := d.want[name]; ok && w.value == rv {
		d.lags = append(d.lags, seenAt{at: time.Now(), lag: float64(time.Since(w.at)) / float64(time.Millisecond)})
		delete(d.want, name)
	}
}

// take returns the lags so far and forgets them.
func (d *delivery) take() []seenAt {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.lags
	d.lags = nil
	return out
}
