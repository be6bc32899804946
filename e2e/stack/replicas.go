package stack

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
)

// AdapterReplica is one adapter process behind the APIService's Service.
type AdapterReplica struct {
	Index int
	Port  int
	URL   string
	// Proc is the running (or last) process; RestartAdapter replaces it.
	Proc *plane.Process
	// Bin is the binary; default <BinDir>/metrics-adapter.
	Bin    string
	args   []string
	starts int
}

// slice names the replica's EndpointSlice.
func (r *AdapterReplica) slice() string { return fmt.Sprintf("%s-replica-%d", AdapterService, r.Index) }

func (s *Stack) startAdapterReplica(ctx context.Context, r *AdapterReplica) error {
	name := "metrics-adapter"
	switch {
	case r.Index < 0:
		name = fmt.Sprintf("metrics-adapter-extra-%d-start-%d", r.Port, r.starts)
	case r.Index > 0 || r.starts > 0:
		name = fmt.Sprintf("metrics-adapter-%d-start-%d", r.Index, r.starts)
	}
	r.starts++
	bin := r.Bin
	if bin == "" {
		bin = filepath.Join(s.Opts.BinDir, "metrics-adapter")
	}
	proc, err := s.StartProcess(name, bin, r.args...)
	if err != nil {
		return err
	}
	r.Proc = proc
	if r.Index == 0 {
		s.Adapter = proc
	}
	if err := s.waitReady(ctx, proc, r.URL+"/readyz"); err != nil {
		return err
	}
	c, err := s.HTTPClient()
	if err != nil {
		return err
	}
	return s.probeAsAggregator(ctx, s.adapterProbeClient(c), r.URL)
}

// StartExtraAdapter starts one more adapter process from bin with the
// adapter's arguments on its own port, outside the Service: it watches and
// serves like a replica but gets no traffic from the aggregator. The memory
// benchmark runs an older build beside the current one this way, so both
// see the same objects at the same time.
func (s *Stack) StartExtraAdapter(ctx context.Context, bin string) (*AdapterReplica, error) {
	if len(s.Adapters) == 0 {
		return nil, fmt.Errorf("no adapter running to copy the arguments from")
	}
	port, err := plane.FreePort()
	if err != nil {
		return nil, err
	}
	first := s.Adapters[0]
	args := slices.Clone(first.args)
	for i, a := range args {
		if strings.HasPrefix(a, "--secure-port=") {
			args[i] = fmt.Sprintf("--secure-port=%d", port)
		}
	}
	r := &AdapterReplica{Index: -1, Port: port, URL: fmt.Sprintf("https://127.0.0.1:%d", port), Bin: bin, args: args, starts: 1}
	if err := s.startAdapterReplica(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// RestartAdapterReplica stops r (SIGKILL) and starts it again.
func (s *Stack) RestartAdapterReplica(ctx context.Context, r *AdapterReplica) error {
	r.Proc.Kill()
	return s.startAdapterReplica(ctx, r)
}

// KillAdapter ends replica i with SIGKILL, as a crash or an evicted pod
// would.
func (s *Stack) KillAdapter(i int) { s.Adapters[i].Proc.Kill() }

// RestartAdapter starts replica i again on its port, as the Deployment
// controller would replace its pod, and waits until it is ready.
func (s *Stack) RestartAdapter(ctx context.Context, i int) error {
	return s.startAdapterReplica(ctx, s.Adapters[i])
}

// registerAdapterReplicas puts every replica behind the Service the
// APIService names, one EndpointSlice per replica (each listens on its own
// loopback port), and starts the endpoint prober.
//
// On a cluster, the kubelet's readiness probe and the EndpointSlice
// controller take a dead or unready pod out of the Service; the local plane
// has neither for processes, so the prober stands in for both: it probes each
// replica's /readyz every 250ms and sets its endpoint's Ready condition. The
// aggregator (--enable-aggregator-routing) picks a random ready endpoint per
// request, as it does on a cluster.
func (s *Stack) registerAdapterReplicas(ctx context.Context) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: AdapterService, Namespace: Namespace},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := s.Client.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Service %s/%s: %w", Namespace, AdapterService, err)
	}
	for _, r := range s.Adapters {
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: r.slice(), Namespace: Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: AdapterService}},
			AddressType: discoveryv1.AddressTypeFQDN,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(r.Port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}
		if _, err := s.Client.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, es, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating EndpointSlice %s: %w", es.Name, err)
		}
	}
	probeCtx, cancel := context.WithCancel(context.Background())
	s.stopProbes = cancel
	go s.probeAdapters(probeCtx)
	return s.RouteAPIService(ctx, Namespace, AdapterService)
}

// probeAdapters keeps each replica's endpoint Ready condition equal to the
// answer of its /readyz until ctx is done.
func (s *Stack) probeAdapters(ctx context.Context) {
	c, err := s.HTTPClient()
	c = s.adapterProbeClient(c)
	if err != nil {
		s.Plane.Opts.Logf("adapter endpoint prober: %v", err)
		return
	}
	c.Timeout = time.Second
	ready := make([]bool, len(s.Adapters))
	for i := range ready {
		ready[i] = true // registered ready after waitReady
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i, r := range s.Adapters {
			now := probe(ctx, c, r.URL+"/readyz")
			if now == ready[i] {
				continue
			}
			if err := s.setEndpointReady(ctx, r, now); err != nil {
				if ctx.Err() == nil {
					s.Plane.Opts.Logf("adapter endpoint prober: replica %d: %v", i, err)
				}
				continue
			}
			ready[i] = now
			s.Plane.Opts.Logf("adapter replica %d: endpoint ready=%t", i, now)
		}
	}
}

func probe(ctx context.Context, c *http.Client, url string) bool {
	req, err := newGet(ctx, url)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (s *Stack) setEndpointReady(ctx context.Context, r *AdapterReplica, ready bool) error {
	slices := s.Client.DiscoveryV1().EndpointSlices(Namespace)
	es, err := slices.Get(ctx, r.slice(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	es.Endpoints[0].Conditions.Ready = ptr.To(ready)
	_, err = slices.Update(ctx, es, metav1.UpdateOptions{})
	return err
}

// AdapterEndpointReady reports replica i's endpoint Ready condition as the
// apiserver has it.
func (s *Stack) AdapterEndpointReady(ctx context.Context, i int) (bool, error) {
	es, err := s.Client.DiscoveryV1().EndpointSlices(Namespace).Get(ctx, s.Adapters[i].slice(), metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	c := es.Endpoints[0].Conditions.Ready
	return c == nil || *c, nil
}

// Stop ends the adapter endpoint prober, then everything the plane started.
func (s *Stack) Stop() {
	if s.stopProbes != nil {
		s.stopProbes()
	}
	s.Plane.Stop()
	s.extenderTLS.remove()
	if s.sourcesDir != "" {
		_ = os.RemoveAll(s.sourcesDir)
	}
}
