//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// TestExtenderOverHTTPS: kube-scheduler reaches the extender over TLS it
// verifies (enableHTTPS, tlsConfig.caFile), filters and binds a burst of
// underlay pods through it, and, speaking HTTP/2, opens one connection for
// all of them instead of one per bind in flight.
func TestExtenderOverHTTPS(t *testing.T) {
	s := startStack(t, stack.Options{Plane: plane.Options{Nodes: 3, Logf: t.Logf}, Extender: true, ExtenderHTTPS: true})
	if !strings.HasPrefix(s.ExtenderURL, "https://") {
		t.Fatalf("extender URL %s, want https", s.ExtenderURL)
	}
	ctx := testContext(t, 3*time.Minute)
	const ns = "https"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	client, err := s.ExtenderHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	conns := func() float64 {
		return scrapeCounterWith(ctx, t, client, s.ExtenderURL, "capscale_extender_http_connections_total")
	}
	before := conns()

	const pods = 30 // three nodes of the default 10 IPs
	var burst []*corev1.Pod
	for i := range pods {
		burst = append(burst, underlayPod(ns, fmt.Sprintf("p-%02d", i), "https"))
	}
	createPods(ctx, t, s, burst...)
	capacity := map[string]int{plane.NodeName(0): 10, plane.NodeName(1): 10, plane.NodeName(2): 10}
	waitBoundWithin(ctx, t, s, ns, capacity, pods, 2*time.Minute)

	// A pod shows bound once the apiserver commits its Binding; the extender
	// counts the bind when the POST returns, a moment later (a full run once
	// saw 29).
	var got float64
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got = scrapeCounterWith(ctx, t, client, s.ExtenderURL, `capscale_extender_binds_total{result="bound"}`)
		return got >= pods, nil
	})
	if got != pods {
		t.Errorf("binds through the extender = %v, want %d", got, pods)
	}
	// The scrape client keeps its connection: what is new is kube-scheduler's.
	if opened := conns() - before; opened < 1 || opened > 2 {
		t.Errorf("kube-scheduler opened %v connections for %d filters and binds, want 1 (HTTP/2), at most 2", opened, pods)
	}
}
