//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// readyzProbe is one capscale component's /readyz.
type readyzProbe struct {
	name string
	url  string
	proc *plane.Process
}

func stackProbes(s *stack.Stack) []readyzProbe {
	return []readyzProbe{
		{"extender", s.ExtenderURL + "/readyz", s.Extender},
		{"metrics-adapter", s.AdapterURL + "/readyz", s.Adapter},
		{"workload-api", s.WorkloadAPIURL + "/readyz", s.WorkloadAPI},
		{"controller", s.Controller.URL + "/readyz", s.Controller.Process},
	}
}

// readyState returns each component's /readyz status code (0: no answer).
func readyState(ctx context.Context, c *http.Client, probes []readyzProbe) map[string]int {
	out := map[string]int{}
	for _, p := range probes {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
		if err != nil {
			continue
		}
		resp, err := c.Do(req)
		if err != nil {
			out[p.name] = 0
			continue
		}
		resp.Body.Close()
		out[p.name] = resp.StatusCode
	}
	return out
}

// waitReadiness waits until every component's /readyz is 200 (ready) or
// every one answers and is not 200 (!ready), and returns how long that took
// per component.
func waitReadiness(ctx context.Context, t *testing.T, c *http.Client, probes []readyzProbe, ready bool, timeout time.Duration) map[string]time.Duration {
	t.Helper()
	start := time.Now()
	took := map[string]time.Duration{}
	var last map[string]int
	// The probes use ctx, not the poll's: the poll's is cancelled at its
	// timeout and would turn the last codes reported into 0s.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = readyState(ctx, c, probes)
		for name, code := range last {
			if _, done := took[name]; !done && (code == 200) == ready && code != 0 {
				took[name] = time.Since(start)
			}
		}
		return len(took) == len(probes), nil
	})
	if err != nil {
		t.Fatalf("waiting for every component's /readyz to be ready=%v: last codes %v", ready, last)
	}
	return took
}

func roundAll(m map[string]time.Duration) string {
	var parts []string
	for _, n := range []string{"extender", "metrics-adapter", "workload-api", "controller"} {
		if d, ok := m[n]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", n, d.Round(10*time.Millisecond)))
		}
	}
	return strings.Join(parts, ", ")
}

// assertAlive fails t if a capscale process has exited: recovering must not
// take a restart.
func assertAlive(t *testing.T, probes []readyzProbe) {
	t.Helper()
	for _, p := range probes {
		if exited, err := p.proc.Exited(); exited {
			t.Errorf("%s exited: %v\n%s", p.name, err, p.proc.Tail(30))
		}
	}
}

// TestControlPlaneRestart is issue 18's fault scenario: kube-apiserver, and
// then etcd, are stopped and started again (same flags, ports and data
// directory) in the middle of a burst of underlay pods, with every capscale
// component running. Each component's /readyz must fail while the
// apiserver is away (its informers no longer follow it: kube.WatchHealth)
// and pass again once they do, without any capscale process restarting;
// no node is over capacity at any poll, and the burst ends with exactly
// the IPs there are bound.
func TestControlPlaneRestart(t *testing.T) {
	po, capacity, total := underlayPlane(t)
	s := startStack(t, stack.Options{
		Plane: po, Extender: true, Adapter: true, WorkloadAPI: true, Controller: true,
		// Past its renew deadline a leading controller gives the Lease up
		// and exits, by design. kube-apiserver takes up to 10s to come back
		// on this shared machine: the defaults (10s) would race it.
		ControllerArgs: []string{"--leader-elect-lease-duration=45s", "--leader-elect-renew-deadline=30s"},
	})
	ctx := testContext(t, 10*time.Minute)
	const ns = "restart"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	c, err := s.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	probes := stackProbes(s)
	waitReadiness(ctx, t, c, probes, true, time.Minute)
	watch := watchOverCommit(ctx, s, ns, capacity)

	// 1. kube-apiserver away mid-burst: 80 pods, stopped at 20 bound.
	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, "first", 80, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(ctx, t, s, ns, 20)
	if err := s.Halt("kube-apiserver", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	halted := time.Now()
	unready := waitReadiness(ctx, t, c, probes, false, 8*time.Second)
	t.Logf("kube-apiserver stopped: unready after %s", roundAll(unready))
	if err := s.Resume(ctx, "kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	recovered := waitReadiness(ctx, t, c, probes, true, 2*time.Minute)
	t.Logf("kube-apiserver back after %s away: ready again after %s", time.Since(halted).Round(100*time.Millisecond), roundAll(recovered))
	waitUnderlay(ctx, t, s, ns, capacity, 80, 0)

	// 2. etcd away mid-burst: 70 more pods (150 for 118 IPs), stopped at
	// 90 bound.
	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, "second", 70, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(ctx, t, s, ns, 90)
	if err := s.Halt("etcd", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	halted = time.Now()
	time.Sleep(3 * time.Second)
	t.Logf("etcd stopped 3s: /readyz codes %v", readyState(ctx, c, probes))
	if err := s.Resume(ctx, "etcd"); err != nil {
		t.Fatal(err)
	}
	recovered = waitReadiness(ctx, t, c, probes, true, 2*time.Minute)
	t.Logf("etcd back after %s away: every component ready after %s", time.Since(halted).Round(100*time.Millisecond), roundAll(recovered))
	waitUnderlay(ctx, t, s, ns, capacity, total, 150-total)
	assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)
	watch.check(t)
	assertAlive(t, probes)
}
