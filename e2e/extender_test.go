//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// underlayCapacity is the capacity the extender e2e gives node i: four nodes
// with 0, six with 3, the rest the default 10 — 118 IPs over 20 nodes.
func underlayCapacity(i int) (annotation string, capacity int) {
	switch {
	case i < 4:
		return "0", 0
	case i < 10:
		return "3", 3
	default:
		return "", 10
	}
}

func startExtenderStack(t *testing.T, nodes int) *stack.Stack {
	t.Helper()
	return startStack(t, stack.Options{
		Plane: plane.Options{
			Nodes: nodes, Logf: t.Logf,
			Node: func(i int, n *corev1.Node) {
				if a, _ := underlayCapacity(i); a != "" {
					n.Annotations[names.UnderlayIPCapacityAnnotation] = a
				}
			},
		},
		Extender: true,
	})
}

func underlayRequest(n int64) corev1.ResourceList {
	return corev1.ResourceList{names.UnderlayIPResource: *resource.NewQuantity(n, resource.DecimalSI)}
}

// TestExtender runs issue 3's scenarios in order on one plane of 20 nodes.
func TestExtender(t *testing.T) {
	s := startExtenderStack(t, 20)
	ctx := testContext(t, 12*time.Minute)
	const ns = "underlay"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	_, capacity, total := underlayPlane(t)

	// 4. (first, while no underlay pod is pending and retried) Pods without
	// the resource never reach the extender and schedule normally.
	filterCalls := `capscale_extender_http_requests_total{code="200",route="filter"}`
	before := scrapeCounter(ctx, t, s, filterCalls)
	const plainNS = "plain"
	if err := s.WaitForNamespace(ctx, plainNS); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.AppsV1().Deployments(plainNS).Create(ctx, SimpleDeployment(plainNS, "plain", 5, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	WaitForRunningPods(ctx, t, s.Plane, plainNS, "app=plain", 5)
	if after := scrapeCounter(ctx, t, s, filterCalls); after != before {
		t.Errorf("filter calls went from %v to %v while only plain pods were scheduled", before, after)
	}

	// 1. Three Deployments at once asking for more IPs than exist.
	demand := map[string]int32{"alpha": 60, "beta": 50, "gamma": 40}
	for name, n := range demand {
		go func() {
			if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, name, n, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
				t.Errorf("creating %s: %v", name, err)
			}
		}()
	}
	want := min(150, total)
	waitUnderlay(ctx, t, s, ns, capacity, want, 150-want)
	assertPendingReason(ctx, t, s, ns)
	assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)
	if calls := scrapeCounter(ctx, t, s, filterCalls); calls <= before {
		t.Errorf("underlay pods were placed but the extender's filter count stayed at %v", calls)
	}

	// 2. Freeing IPs lets Pending pods schedule: without gamma, demand (110)
	// fits in 118.
	if err := s.Client.AppsV1().Deployments(ns).Delete(ctx, "gamma", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUnderlay(ctx, t, s, ns, capacity, 110, 0)

	// 3. A burst with the extender killed in the middle and restarted: the
	// ledger is rebuilt from the pods and still nothing is over capacity.
	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, "delta", 40, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	s.KillExtender()
	assertNeverOver(ctx, t, s, ns, capacity, time.Second)
	if err := s.StartExtender(ctx); err != nil {
		t.Fatal(err)
	}
	waitUnderlay(ctx, t, s, ns, capacity, total, 150-total)
	assertNeverOver(ctx, t, s, ns, capacity, 3*time.Second)
}

// underlayUsage counts bound and pending pods in ns and the IPs per node.
func underlayUsage(ctx context.Context, s *stack.Stack, ns string) (perNode map[string]int, bound, pending int, err error) {
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, 0, err
	}
	perNode = map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Spec.NodeName == "" {
			pending++
			continue
		}
		bound++
		q := p.Spec.Containers[0].Resources.Limits[names.UnderlayIPResource]
		perNode[p.Spec.NodeName] += int(q.Value())
	}
	return perNode, bound, pending, nil
}

func overCapacity(perNode, capacity map[string]int) string {
	var over []string
	for node, used := range perNode {
		if used > capacity[node] {
			over = append(over, fmt.Sprintf("%s %d/%d", node, used, capacity[node]))
		}
	}
	return strings.Join(over, ", ")
}

// waitUnderlay waits until exactly wantBound pods are bound and wantPending
// are pending, failing at once if any node ever exceeds its capacity.
func waitUnderlay(ctx context.Context, t *testing.T, s *stack.Stack, ns string, capacity map[string]int, wantBound, wantPending int) {
	t.Helper()
	var bound, pending int
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		perNode, b, p, err := underlayUsage(ctx, s, ns)
		if err != nil {
			return false, nil
		}
		if over := overCapacity(perNode, capacity); over != "" {
			return false, fmt.Errorf("nodes over underlay-IP capacity: %s", over)
		}
		bound, pending = b, p
		return bound == wantBound && pending == wantPending, nil
	})
	if err != nil {
		t.Fatalf("want %d bound and %d pending, have %d and %d: %v", wantBound, wantPending, bound, pending, err)
	}
}

// assertNeverOver watches for d that no node exceeds its capacity.
func assertNeverOver(ctx context.Context, t *testing.T, s *stack.Stack, ns string, capacity map[string]int, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		perNode, _, _, err := underlayUsage(ctx, s, ns)
		if err != nil {
			t.Fatal(err)
		}
		if over := overCapacity(perNode, capacity); over != "" {
			t.Fatalf("nodes over underlay-IP capacity: %s", over)
		}
	}
}

// assertPendingReason checks that pending pods carry the extender's reason in
// their FailedScheduling events.
func assertPendingReason(ctx context.Context, t *testing.T, s *stack.Stack, ns string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			last = e.Message
			if strings.Contains(e.Message, "underlay IPs exhausted") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event names the extender's reason; last message: %q", last)
	}
}

// scrapeCounter reads one sample from the extender's /metrics.
func scrapeCounter(ctx context.Context, t *testing.T, s *stack.Stack, series string) float64 {
	t.Helper()
	return scrapeCounterAt(ctx, t, s.ExtenderURL, series)
}

// scrapeCounterAt reads one sample from the /metrics of the extender at url.
func scrapeCounterAt(ctx context.Context, t *testing.T, url, series string) float64 {
	t.Helper()
	return scrapeCounterWith(ctx, t, http.DefaultClient, url, series)
}

// scrapeCounterWith is scrapeCounterAt through client.
func scrapeCounterWith(ctx context.Context, t *testing.T, client *http.Client, url, series string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
