//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// TestPluginReadsCapacitySources: with the plugin's capacitySources arg,
// capscale-scheduler (kube-scheduler v1.37.2 with the plugin, as
// system:kube-scheduler) reads the IPAM's objects itself, so a change of
// one reaches a waiting pod with capscale-controller stopped: the Node
// still carries the mirror's older count, and only the scheduler's own
// read can bind the pod. A node whose object goes is invalid at once,
// never the Node's older count.
func TestPluginReadsCapacitySources(t *testing.T) {
	src := ownIPAM(t)
	o := stack.Options{Plane: plane.Options{Nodes: 2, Logf: t.Logf}, Plugin: true, SchedulerReadsSources: true}
	o.CapacitySources = ownIPAMSourceSelecting("marked", "")
	o.Prepare = func(ctx context.Context, s *stack.Stack) error { return src.crd(ctx, s) }
	s := startStack(t, o)
	ctx := testContext(t, 5*time.Minute)
	n0, n1 := plane.NodeName(0), plane.NodeName(1)
	putObject(ctx, t, s, src.gvr, src.object(n0, "", 2))
	putObject(ctx, t, s, src.gvr, src.object(n1, "", 2))
	waitMirrored(ctx, t, s, n0, is(2), 2)
	waitMirrored(ctx, t, s, n1, is(2), 2)
	// The scheduler's own series say when it has read both nodes (its
	// first list of the CRD, made after it started, may come after the
	// controller's).
	admin, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(series string) float64 { return scrapeCounterWith(ctx, t, admin, s.SchedulerEndpoint(), series) }
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return scrape("capscale_scheduler_capacity_sources_synced") == 1 && scrape("capscale_scheduler_capacity_source_nodes_read") == 2, nil
	}); err != nil {
		t.Errorf("capscale-scheduler's /metrics never said it read the 2 nodes: %v; its capscale series:\n%s",
			err, metricLines(ctx, t, admin, s.SchedulerEndpoint(), "capscale_"))
	}

	s.Controller.Stop(5 * time.Second)
	const ns = "reads"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	createPods(ctx, t, s, pinnedPods(ns, n0, 3)...)
	waitUnderlay(ctx, t, s, ns, map[string]int{n0: 2}, 2, 1)
	stayBoundPending(ctx, t, s, ns, 2, 1, 2*time.Second)

	start := time.Now()
	putObject(ctx, t, s, src.gvr, src.object(n0, "", 3))
	waitUnderlay(ctx, t, s, ns, map[string]int{n0: 3}, 3, 0)
	t.Logf("the object to the waiting pod bound, capscale-controller stopped: %s", time.Since(start).Round(time.Millisecond))

	// n1's object goes: its Node still says 2, the plugin says invalid.
	deleteObject(ctx, t, s, src.gvr, src.object(n1, "", 2))
	const gone = "gone"
	if reason := pinnedPending(ctx, t, s, gone, n1, 1); !strings.Contains(reason, "no nodeippools.ipam.example.com object maps to this node") {
		t.Errorf("FailedScheduling says %q, want the object missing", reason)
	}
}

// metricLines are the lines of url's /metrics that begin with prefix.
func metricLines(ctx context.Context, t *testing.T, client *http.Client, url, prefix string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return fmt.Sprintf("HTTP %d, %d bytes, %d lines:\n%s", resp.StatusCode, len(body), len(out), strings.Join(out, "\n"))
}
