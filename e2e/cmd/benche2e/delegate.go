package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// delegateOverhead measures what forwarding costs (issue 10): the same GET
// of the test-adapter's external metric, sent to capscale's adapter in
// delegation mode (capscale authorizes, forwards, the delegate authorizes
// capscale and answers) and to the test-adapter directly, alternating
// request by request in one run, one request in flight.
func delegateOverhead(ctx context.Context, samples int, binDir string) error {
	run := thisRun(time.Now(), loadAverage())
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	taBin := stack.TestAdapterBin(binDir)
	if _, err := os.Stat(taBin); err != nil {
		return fmt.Errorf("the test-adapter is missing (make bench builds it): %w", err)
	}
	s, err := stack.Start(ctx, stack.Options{BinDir: binDir, Plane: plane.Options{BinDir: binDir, Nodes: 1}})
	if err != nil {
		return err
	}
	defer s.Stop()
	const ns = "bench"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		return err
	}
	ta, err := s.StartTestAdapter(ctx, taBin, "bench-delegate", "test-adapter")
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "metrics-adapter"), "preflight", "--kubeconfig="+s.Kubeconfig, "--delegate").CombinedOutput()
	if err != nil {
		return fmt.Errorf("preflight --delegate: %w\n%s", err, out)
	}
	if err := s.StartAdapter(ctx); err != nil {
		return err
	}
	c, err := adminClient(s, 2)
	if err != nil {
		return err
	}
	path := "/apis/external.metrics.k8s.io/v1beta1/namespaces/" + ns + "/my-external-metric?labelSelector=foo%3Dbar"
	urls := map[string]string{"forwarded": s.AdapterURL + path, "direct": ta.URL + path}
	for _, u := range urls {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			err := getOK(ctx, c, u)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return err
			}
		}
	}
	lat := map[string][]time.Duration{}
	// Untimed warm-up, then the timed alternation.
	for i := 0; i < 2*samples+400; i++ {
		who := "direct"
		if i%2 == 1 {
			who = "forwarded"
		}
		t0 := time.Now()
		if err := getOK(ctx, c, urls[who]); err != nil {
			return err
		}
		if i >= 400 {
			lat[who] = append(lat[who], time.Since(t0))
		}
	}
	fmt.Printf("# %d GETs each, alternating, 1 in flight, client certificate as admin\n", samples)
	fmt.Printf("path\tp50 ms\tp90 ms\tp99 ms\n")
	for _, who := range []string{"direct", "forwarded"} {
		l := lat[who]
		fmt.Printf("%s\t%.3f\t%.3f\t%.3f\n", who, ms(percentile(l, .5)), ms(percentile(l, .9)), ms(percentile(l, .99)))
	}
	over := ms(percentile(lat["forwarded"], .5)) - ms(percentile(lat["direct"], .5))
	fmt.Printf("p50 overhead of forwarding: %.3f ms (goal: <= 1 ms)\n", over)
	printRows(delegateRows(ms(percentile(lat["direct"], .5)), ms(percentile(lat["direct"], .99)),
		ms(percentile(lat["forwarded"], .5)), ms(percentile(lat["forwarded"], .99))), run)
	return nil
}
