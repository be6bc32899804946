package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"

	"github.com/capscale/capscale/e2e/plane"
)

// The rig's I/O: CPU from /proc, metrics from /metrics, and the waits for a
// quiet plane. The decisions over what these read are in rig.go.

// userHZ is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU
// fields: 100 on every Linux architecture Kubernetes runs on.
const userHZ = 100

// procCPU reads a process's user + system CPU time.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: count the
	// fields after its closing one (state is field 3, utime 14, stime 15).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// measured are the processes whose CPU the rig charges to pods.
var measured = []string{"kube-scheduler", "extender", "kube-apiserver", "etcd", "kwok", "kube-controller-manager"}

// livePids maps each measured process name to the pid of its running
// instance (the newest, after a restart).
func livePids(p *plane.Plane) map[string]int {
	out := map[string]int{}
	for _, proc := range p.Processes() {
		if exited, _ := proc.Exited(); !exited {
			out[proc.Name] = proc.Pid()
		}
	}
	return out
}

// sampleCPU reads the CPU time of every measured process that runs.
func sampleCPU(pids map[string]int) (cpuTimes, error) {
	out := cpuTimes{}
	for _, name := range measured {
		pid, ok := pids[name]
		if !ok {
			continue
		}
		d, err := procCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = d
	}
	return out, nil
}

// total sums a process map.
func total(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// waitQuiet returns once the plane's CPU rate over one-second windows has
// been back at idle for two windows in a row (quietEnough on the sum of the
// measured processes), or after limit. It reports how long it waited and
// whether the plane got quiet.
func waitQuiet(ctx context.Context, pids map[string]int, idle map[string]float64, limit time.Duration) (time.Duration, bool, error) {
	start := time.Now()
	calm := 0
	for time.Since(start) < limit {
		t0 := time.Now()
		a, err := sampleCPU(pids)
		if err != nil {
			return 0, false, err
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-time.After(time.Second):
		}
		b, err := sampleCPU(pids)
		if err != nil {
			return 0, false, err
		}
		if quietEnough(total(idleRates(a, b, time.Since(t0))), total(idle)) {
			calm++
			if calm == 2 {
				return time.Since(start), true, nil
			}
		} else {
			calm = 0
		}
	}
	return time.Since(start), false, nil
}

// metricFamilies is one scrape of a /metrics endpoint.
type metricFamilies map[string]*dto.MetricFamily

func parseMetrics(b []byte) (metricFamilies, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(b))
}

// scrapeHTTP reads a /metrics endpoint with c.
func scrapeHTTP(ctx context.Context, c *http.Client, url string) (metricFamilies, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(buf.Bytes())
}

// scrapeAPIServer reads kube-apiserver's /metrics with cs's credentials.
func scrapeAPIServer(ctx context.Context, cs kubernetes.Interface) (metricFamilies, error) {
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return parseMetrics(b)
}

// labelsMatch says whether m carries every label in want.
func labelsMatch(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// histogramBuckets sums the buckets of every series of a histogram family
// whose labels match want.
func (f metricFamilies) histogramBuckets(name string, want map[string]string) []bucket {
	fam, ok := f[name]
	if !ok {
		return nil
	}
	sum := map[float64]float64{}
	for _, m := range fam.GetMetric() {
		if !labelsMatch(m, want) || m.GetHistogram() == nil {
			continue
		}
		for _, b := range m.GetHistogram().GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) { // the sample count says it below
				sum[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		sum[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
	}
	out := make([]bucket, 0, len(sum))
	for le, c := range sum {
		out = append(out, bucket{le: le, count: c})
	}
	return out
}

// counters returns each series of a counter family keyed by the values of
// the given labels, joined with "/".
func (f metricFamilies) counters(name string, keys ...string) map[string]float64 {
	return f.byLabels(name, keys, func(m *dto.Metric) (float64, bool) { return m.GetCounter().GetValue(), true })
}

// counts is sums' sample counts.
func (f metricFamilies) counts(name string, keys ...string) map[string]float64 {
	return f.byLabels(name, keys, func(m *dto.Metric) (float64, bool) {
		h := m.GetHistogram()
		return float64(h.GetSampleCount()), h != nil
	})
}

// gauges is each gauge series' value, keyed by keys.
func (f metricFamilies) gauges(name string, keys ...string) map[string]float64 {
	return f.byLabels(name, keys, func(m *dto.Metric) (float64, bool) { return m.GetGauge().GetValue(), m.GetGauge() != nil })
}

// byLabels sums value over each series of family name keyed by the values
// of keys, joined with "/"; a series value refuses is left out.
func (f metricFamilies) byLabels(name string, keys []string, value func(*dto.Metric) (float64, bool)) map[string]float64 {
	out := map[string]float64{}
	fam, ok := f[name]
	if !ok {
		return out
	}
	for _, m := range fam.GetMetric() {
		v, ok := value(m)
		if !ok {
			continue
		}
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			if v := have[k]; v != "" {
				parts = append(parts, v)
			}
		}
		out[strings.Join(parts, "/")] += v
	}
	return out
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
