package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// metricsLoad measures GET latency and throughput of an external metric with
// series series and clients concurrent clients, directly and through the
// aggregator, against capscale's adapter and, alternating in the same run,
// the floor of the same framework: custom-metrics-apiserver's test-adapter
// serving static values (issue 7, item 3).
func metricsLoad(ctx context.Context, series, clients, rate int, phase time.Duration, binDir string) error {
	run := thisRun(time.Now(), loadAverage())
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	floorBin := filepath.Join(binDir, "test-adapter")
	if _, err := os.Stat(floorBin); err != nil {
		return fmt.Errorf("the floor adapter is missing (make bench builds it): %w", err)
	}
	s, err := stack.Start(ctx, stack.Options{
		BinDir: binDir,
		Plane:  plane.Options{BinDir: binDir, Nodes: 1},
		// No config: the QPS metrics come from workload annotations only.
		Adapter: true,
	})
	if err != nil {
		return err
	}
	defer s.Stop()
	const ns = "bench"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		return err
	}
	if err := createQPSWorkloads(ctx, s, ns, series); err != nil {
		return err
	}
	floorURL, floorPort, err := startFloor(ctx, s, floorBin)
	if err != nil {
		return err
	}
	adapterPort, _ := strconv.Atoi(s.AdapterURL[len("https://127.0.0.1:"):])

	ours := func(base string) func(*rand.Rand) string {
		return func(r *rand.Rand) string {
			return fmt.Sprintf("%s/apis/external.metrics.k8s.io/v1beta1/namespaces/%s/%s?labelSelector=workload%%3Dw-%04d,policy%%3Dqps", base, ns, names.DesiredReplicasMetric, r.IntN(series))
		}
	}
	floor := func(base string) func(*rand.Rand) string {
		return func(*rand.Rand) string {
			return base + "/apis/external.metrics.k8s.io/v1beta1/namespaces/" + ns + "/my-external-metric?labelSelector=foo%3Dbar"
		}
	}
	direct, err := adminClient(s, clients)
	if err != nil {
		return err
	}
	// Every request must succeed before anything is timed. Both load the
	// client CA for delegated authentication shortly after /readyz, so a
	// first request may still be anonymous.
	for _, u := range []string{ours(s.AdapterURL)(rand.New(rand.NewPCG(1, 2))), floor(floorURL)(nil)} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			err := getOK(ctx, direct, u)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return err
			}
		}
	}
	if rate > 0 {
		fmt.Printf("# %d series, open loop at %d req/s (at most %d in flight), %s per phase\n", series, rate, clients, phase)
	} else {
		fmt.Printf("# %d series, %d concurrent closed-loop clients, %s per phase\n", series, clients, phase)
	}
	fmt.Printf("path\tadapter\trequests\treq/s\tp50 ms\tp99 ms\n")
	type agg struct {
		lat  []time.Duration
		n    int
		secs float64
	}
	results := map[string]*agg{}
	runPhase := func(path, who string, c *http.Client, url func(*rand.Rand) string) error {
		// Untimed warm-up at the same load: connections, caches and the
		// delegated-authorization cache settle before the timed phase.
		if _, _, _, err := load(ctx, c, url, clients, rate, 2*time.Second); err != nil {
			return fmt.Errorf("%s %s warm-up: %w", path, who, err)
		}
		lat, n, secs, err := load(ctx, c, url, clients, rate, phase)
		if err != nil {
			return fmt.Errorf("%s %s: %w", path, who, err)
		}
		p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
		fmt.Printf("%s\t%s\t%d\t%.0f\t%.2f\t%.2f\n", path, who, n, float64(n)/secs, ms(p50), ms(p99))
		k := path + "/" + who
		if results[k] == nil {
			results[k] = &agg{}
		}
		results[k].lat = append(results[k].lat, lat...)
		results[k].n += n
		results[k].secs += secs
		return nil
	}
	for round := 0; round < 3; round++ {
		order := []string{"capscale", "floor"}
		if round%2 == 1 {
			order = []string{"floor", "capscale"}
		}
		for _, who := range order {
			u := ours(s.AdapterURL)
			if who == "floor" {
				u = floor(floorURL)
			}
			if err := runPhase("direct", who, direct, u); err != nil {
				return err
			}
		}
	}
	// Through the aggregator: the APIService's EndpointSlice decides which
	// adapter the aggregator dials; swap it between phases.
	viaAPI, err := aggregatorClient(s, clients)
	if err != nil {
		return err
	}
	for round := 0; round < 2; round++ {
		order := []string{"capscale", "floor"}
		if round%2 == 1 {
			order = []string{"floor", "capscale"}
		}
		for _, who := range order {
			port, u := adapterPort, ours(s.APIServerURL)
			if who == "floor" {
				port, u = floorPort, floor(s.APIServerURL)
			}
			if err := routeAggregator(ctx, s, port, viaAPI, u(rand.New(rand.NewPCG(3, 4)))); err != nil {
				return err
			}
			if err := runPhase("aggregator", who, viaAPI, u); err != nil {
				return err
			}
		}
	}
	fmt.Printf("summary\tp50 ms\tp99 ms\treq/s\n")
	for _, k := range []string{"direct/capscale", "direct/floor", "aggregator/capscale", "aggregator/floor"} {
		r := results[k]
		fmt.Printf("%s\t%.2f\t%.2f\t%.0f\n", k, ms(percentile(r.lat, .5)), ms(percentile(r.lat, .99)), float64(r.n)/r.secs)
	}
	var figures []pathFigures
	for _, path := range []string{"direct", "aggregator"} {
		o, f := results[path+"/capscale"], results[path+"/floor"]
		figures = append(figures, pathFigures{Path: path,
			OursP50: ms(percentile(o.lat, .5)), OursP99: ms(percentile(o.lat, .99)),
			FloorP50: ms(percentile(f.lat, .5)), FloorP99: ms(percentile(f.lat, .99)),
			OursRate: float64(o.n) / o.secs, FloorRate: float64(f.n) / f.secs})
		fmt.Printf("ratio capscale/floor %s: p50 %.2f, p99 %.2f, throughput %.2f (goal: latency ratio <= 1.2)\n", path,
			float64(percentile(o.lat, .5))/float64(percentile(f.lat, .5)),
			float64(percentile(o.lat, .99))/float64(percentile(f.lat, .99)),
			(float64(o.n)/o.secs)/(float64(f.n)/f.secs))
	}
	printRows(metricsRows(rate, clients, figures), run)
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}

// load issues GETs for d and returns every latency. With rate 0 it runs
// clients closed-loop goroutines (each sends its next request when the last
// one returned: throughput at saturation); with a rate it sends that many
// requests per second whatever the answers' speed (open loop, at most
// clients in flight), which is what a latency percentile needs.
func load(ctx context.Context, c *http.Client, url func(*rand.Rand) string, clients, rate int, d time.Duration) ([]time.Duration, int, float64, error) {
	var (
		mu   sync.Mutex
		all  []time.Duration
		wg   sync.WaitGroup
		ferr error
		shed int
	)
	defer func() {
		if shed > 0 {
			fmt.Printf("# %d requests not sent: %d already in flight\n", shed, clients)
		}
	}()
	record := func(lat time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			ferr = err
			return
		}
		all = append(all, lat)
	}
	start := time.Now()
	end := start.Add(d)
	if rate > 0 {
		sem := make(chan struct{}, clients)
		r := rand.New(rand.NewPCG(9, 9))
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for now := range tick.C {
			if now.After(end) {
				break
			}
			select {
			case sem <- struct{}{}:
			default:
				// All in flight: the server cannot keep up right now; the
				// request is not sent and is counted as shed.
				mu.Lock()
				shed++
				mu.Unlock()
				continue
			}
			u := url(r)
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				t0 := time.Now()
				err := getOK(ctx, c, u)
				record(time.Since(t0), err)
			}()
		}
		wg.Wait()
		return all, len(all), time.Since(start).Seconds(), ferr
	}
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for time.Now().Before(end) {
				t0 := time.Now()
				err := getOK(ctx, c, url(r))
				record(time.Since(t0), err)
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return all, len(all), time.Since(start).Seconds(), ferr
}

func getOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return nil
}

// adminClient talks to the adapters directly with the admin client
// certificate, which they accept through the cluster's client CA.
func adminClient(s *stack.Stack, clients int) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(s.Config.CertFile, s.Config.KeyFile)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(s.PKI.ClusterCA.CertFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: clients, ForceAttemptHTTP2: true,
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, nil
}

func aggregatorClient(s *stack.Stack, clients int) (*http.Client, error) {
	cfg := rest.CopyConfig(s.Config)
	cfg.QPS, cfg.Burst = -1, 0
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: rt, Timeout: 30 * time.Second}, nil
}

// routeAggregator points the APIService's EndpointSlice at port and waits
// until a request through the aggregator succeeds against it.
func routeAggregator(ctx context.Context, s *stack.Stack, port int, c *http.Client, probe string) error {
	patch := fmt.Sprintf(`{"ports":[{"name":"https","port":%d,"protocol":"TCP"}]}`, port)
	if _, err := s.Client.DiscoveryV1().EndpointSlices(stack.Namespace).Patch(ctx, stack.AdapterService+"-local", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("re-pointing the aggregator: %w", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if getOK(ctx, c, probe) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the aggregator did not reach port %d within 30s", port)
		}
	}
}

// startFloor runs the framework's test-adapter with a serving certificate
// the APIService's caBundle (the cluster CA) verifies.
func startFloor(ctx context.Context, s *stack.Stack, bin string) (string, int, error) {
	port, err := plane.FreePort()
	if err != nil {
		return "", 0, err
	}
	cert, err := s.ServingCert("test-adapter", stack.AdapterService+"."+stack.Namespace+".svc")
	if err != nil {
		return "", 0, err
	}
	// The same identity as capscale's adapter (its ServiceAccount, its
	// RBAC), so that delegated authentication and authorization cost the
	// same on both sides and only the providers differ.
	kc, err := s.ServiceAccountKubeconfig(ctx, stack.Namespace, "capscale-metrics-adapter")
	if err != nil {
		return "", 0, err
	}
	proc, err := s.StartProcess("test-adapter", bin,
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1",
		"--tls-cert-file="+cert.CertFile, "--tls-private-key-file="+cert.KeyFile,
		"--lister-kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc)
	if err != nil {
		return "", 0, err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	c, err := adminClient(s, 1)
	if err != nil {
		return "", 0, err
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if getOK(ctx, c, url+"/readyz") == nil {
			return url, port, nil
		}
		if exited, err := proc.Exited(); exited || time.Now().After(deadline) {
			return "", 0, fmt.Errorf("test-adapter not ready (%v):\n%s", err, proc.Tail(20))
		}
	}
}

// createQPSWorkloads makes n Deployments (0 replicas) with QPS annotations:
// n series of capscale-desired-replicas{policy=qps}.
func createQPSWorkloads(ctx context.Context, s *stack.Stack, ns string, n int) error {
	cfg := rest.CopyConfig(s.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	err := forEach(ctx, n, 32, nil, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("w-%04d", i)
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
				names.SinglePodQPSAnnotation: "100", names.TotalQPSAnnotation: strconv.Itoa(100 + i),
			}},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/web:1"}}}},
			},
		}
		_, err := s.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating workloads: %w", err)
	}
	return nil
}
