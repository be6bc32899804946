//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/extender/binderlease"
	"github.com/capscale/capscale/internal/names"
)

// TestBinderLeaseUnderBacklog is issue 41's fault 2: a burst of 300
// underlay pods against an extender allowed 5 API calls a second, so that
// kube-scheduler offers binds far faster than they can be sent, with a
// second binder ID (a dedicated scheduler's extender) campaigning beside it.
// The binder Lease renews on its own client and rate limit, so it never
// lapses and the second binder never takes over; a Binding that cannot be
// sent within the lease's validity or kube-scheduler's deadline fails as
// not sent and holds no reservation, so no later retry is refused as
// in_flight; every pod binds, and no node is ever over capacity.
func TestBinderLeaseUnderBacklog(t *testing.T) {
	const nodes, perNode, pods = 10, 30, 300
	capacity := map[string]int{}
	for i := range nodes {
		capacity[plane.NodeName(i)] = perNode
	}
	s := startStack(t, stack.Options{
		Plane: plane.Options{Nodes: nodes, Logf: t.Logf, Node: func(i int, n *corev1.Node) {
			n.Annotations[names.UnderlayIPCapacityAnnotation] = fmt.Sprint(perNode)
		}},
		Extender:     true,
		ExtenderArgs: []string{"--binder-id=default-scheduler", "--kube-api-qps=5", "--kube-api-burst=5"},
	})
	ctx := testContext(t, 10*time.Minute)
	const ns = "backlog"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	waitLeaseHolder(ctx, t, s, "default-scheduler")
	if _, err := s.StartSchedulerReplicaWith(ctx, "dedicated", "--binder-id=capscale-scheduler"); err != nil {
		t.Fatal(err)
	}
	over := watchOverCommit(ctx, s, ns, capacity)
	lease := watchBinderLease(ctx, s, "default-scheduler")

	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, "burst", pods, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitUnderlay(ctx, t, s, ns, capacity, pods, 0)
	t.Logf("%d pods bound in %s", pods, time.Since(start).Round(time.Second))
	lease.check(t, "the binder Lease held by the holder")
	over.check(t)

	for series, want := range map[string]string{
		`capscale_extender_binds_total{result="not_binder"}`:           "0: the lease lapsed under the backlog",
		`capscale_extender_bind_conflicts_total{conflict="in_flight"}`: "0: a Binding never sent kept its reservation",
	} {
		if got := scrapeCounter(ctx, t, s, series); got != 0 {
			t.Errorf("%s = %v, want %s", series, got, want)
		}
	}
	// Evidence that the backlog was real: binds that the rate limit could
	// not admit in time, refused before they were sent.
	if got := scrapeCounter(ctx, t, s, `capscale_extender_binds_total{result="not_sent"}`); got == 0 {
		t.Errorf("no bind was refused as not sent: the burst never outran --kube-api-qps, the test shows nothing")
	} else {
		t.Logf("%v binds refused before they were sent", got)
	}
}

// watchBinderLease polls the binder Lease and the holder extender's
// binder_lease_held gauge: a poll that finds the Lease passed on, or the
// holder not holding it, is a lapse.
func watchBinderLease(ctx context.Context, s *stack.Stack, holder string) *pollWatch {
	return startPollWatch(ctx, 250*time.Millisecond, func(ctx context.Context) (string, bool) {
		l, err := s.Client.CoordinationV1().Leases(stack.Namespace).Get(ctx, binderlease.Name, metav1.GetOptions{})
		if err != nil {
			return "", false
		}
		held, err := gauge(ctx, s.ExtenderURL, "capscale_extender_binder_lease_held")
		switch {
		case l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder:
			return fmt.Sprintf("the Lease passed to %v", l.Spec.HolderIdentity), true
		case err == nil && held != 1:
			return fmt.Sprintf("the holder's binder_lease_held was %v", held), true
		}
		return "", true
	})
}

// gauge reads one sample from url's /metrics; it fails rather than the
// test, for a poller's goroutine.
func gauge(ctx context.Context, url, series string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("%s not in %s/metrics", series, url)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}
