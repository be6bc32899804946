package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/capscale/capscale/extender"
)

// ledger reads the extender's /capacity into s: each node's used IPs as its
// view, and its reservations.
func ledger(ctx context.Context, c *http.Client, url string, o *observer, s *Sample) error {
	var rep extender.Report
	if err := getJSON(ctx, c, url+"/capacity", &rep); err != nil {
		return err
	}
	used := make(map[string]int64, len(rep.Nodes))
	for _, n := range rep.Nodes {
		if n.Known {
			used[n.Name] = n.Used
		}
		for _, p := range n.Pods {
			if p.State == "reserved" {
				b, g := o.podTimes(types.UID(p.UID), s.At)
				s.Reservations = append(s.Reservations, Reservation{UID: string(p.UID), BoundFor: b, GoneFor: g})
			}
		}
	}
	for i := range s.Nodes {
		if v, ok := used[s.Nodes[i].Name]; ok {
			s.Nodes[i].View = &v
		}
	}
	return nil
}

// extenderCounters reads the waiting set's size and the requeue writes
// that reached the apiserver from the extender's /metrics.
func extenderCounters(ctx context.Context, c *http.Client, url string) (waiting, writes float64, err error) {
	m, err := scrape(ctx, c, url+"/metrics")
	if err != nil {
		return 0, 0, err
	}
	for name, v := range m {
		switch {
		case name == "capscale_extender_waiting_pods":
			waiting = v
		case strings.HasPrefix(name, "capscale_extender_requeue_writes_total{") && !strings.Contains(name, `"skipped"`):
			writes += v
		}
	}
	return waiting, writes, nil
}

// schedulerAttempts reads kube-scheduler's scheduling attempts, summed over
// its profiles and results, from its /metrics.
func schedulerAttempts(ctx context.Context, c *http.Client, url string) (float64, error) {
	m, err := scrape(ctx, c, url+"/metrics")
	if err != nil {
		return 0, err
	}
	n := 0.0
	for name, v := range m {
		if strings.HasPrefix(name, "scheduler_schedule_attempts_total{") {
			n += v
		}
	}
	return n, nil
}

// scrape reads a Prometheus text exposition into series -> value.
func scrape(ctx context.Context, c *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

func getJSON(ctx context.Context, c *http.Client, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Usage is one process's resources at one time.
type Usage struct {
	RSSBytes, Conns, Goroutines float64
}

// procUsage reads a process's resident memory and its open sockets from
// /proc; goroutines come from its /metrics when it serves one.
func procUsage(pid int) (Usage, error) {
	var u Usage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			u.RSSBytes = kb * 1024
		}
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return u, err
	}
	for _, e := range entries {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			u.Conns++
		}
	}
	return u, nil
}
