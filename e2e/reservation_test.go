//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/internal/names"
)

// watchGate is a proxy between a client (the extender, a scheduler) and
// kube-apiserver. While frozen, it reads the watch streams of its path
// (pods, or nodes) from the apiserver and throws the bytes away: the
// client's informer sees no event, yet its watch stays open, so the client
// stays ready and binds (its Binding POSTs pass). A stream that lost bytes
// never delivers again; Thaw cuts it, so the informer resumes from the last
// event it saw — as when kube-apiserver dies after a write and before
// sending its event.
type watchGate struct {
	// path is the collection whose watches it gates: /api/v1/pods or
	// /api/v1/nodes.
	path   string
	srv    *httptest.Server
	target atomic.Pointer[httputil.ReverseProxy]
	frozen atomic.Bool

	mu      sync.Mutex
	streams map[*gatedBody]bool
}

func newWatchGate(t *testing.T, path string) *watchGate {
	g := &watchGate{path: path, streams: map[*gatedBody]bool{}}
	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := g.target.Load()
		if p == nil {
			http.Error(w, "no apiserver yet", http.StatusServiceUnavailable)
			return
		}
		p.ServeHTTP(w, r)
	}))
	// Registered before the stack's cleanup, so it runs after the extender
	// is stopped and its watches are gone.
	t.Cleanup(func() {
		g.srv.CloseClientConnections()
		g.srv.Close()
	})
	return g
}

// connect points the gate at the plane's kube-apiserver and starts it with
// a certificate of the cluster CA (client-go sends its token only over TLS).
func (g *watchGate) connect(s *stack.Stack) error {
	c, err := s.HTTPClient()
	if err != nil {
		return err
	}
	pair, err := s.ServingCert("watch-gate")
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	if err != nil {
		return err
	}
	g.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	defer g.srv.StartTLS()
	u, err := url.Parse(s.APIServerURL)
	if err != nil {
		return err
	}
	p := httputil.NewSingleHostReverseProxy(u)
	p.Transport = gateTransport{g: g, next: c.Transport}
	p.FlushInterval = -1
	p.ErrorLog = log.New(io.Discard, "", 0)
	g.target.Store(p)
	return nil
}

// freeze starts throwing the path's watch events away.
func (g *watchGate) freeze() { g.frozen.Store(true) }

// thaw cuts every stream that lost events and lets new ones flow.
func (g *watchGate) thaw() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.frozen.Store(false)
	for b := range g.streams {
		if b.lost.Load() {
			b.ReadCloser.Close()
		}
	}
}

type gateTransport struct {
	g    *watchGate
	next http.RoundTripper
}

func (t gateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil || r.URL.Path != t.g.path || r.URL.Query().Get("watch") != "true" {
		return resp, err
	}
	b := &gatedBody{ReadCloser: resp.Body, g: t.g}
	t.g.mu.Lock()
	t.g.streams[b] = true
	t.g.mu.Unlock()
	resp.Body = b
	return resp, nil
}

// gatedBody is one watch stream of the gate's path.
type gatedBody struct {
	io.ReadCloser
	g    *watchGate
	lost atomic.Bool
}

func (b *gatedBody) Read(p []byte) (int, error) {
	for {
		n, err := b.ReadCloser.Read(p)
		if n > 0 && (b.lost.Load() || b.g.frozen.Load()) {
			b.lost.Store(true)
			n = 0
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
}

func (b *gatedBody) Close() error {
	b.g.mu.Lock()
	delete(b.g.streams, b)
	b.g.mu.Unlock()
	return b.ReadCloser.Close()
}

// reservationState is how the extender's /capacity shows pod name of ns:
// "bound", "reserved" or "" (absent).
func reservationState(ctx context.Context, t *testing.T, s *stack.Stack, ns, name string) string {
	t.Helper()
	rep, err := capacityReport(ctx, s.ExtenderURL)
	if err != nil {
		t.Fatalf("reading the extender's /capacity: %v", err)
	}
	return podState(rep, ns, name)
}

func podState(rep extender.Report, ns, name string) string {
	for _, n := range rep.Nodes {
		for _, p := range n.Pods {
			if p.Namespace == ns && p.Name == name {
				return p.State
			}
		}
	}
	return ""
}

func hasFreedCondition(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == extender.FreedConditionType {
			return true
		}
	}
	return false
}

// TestReservationsAfterLostWatch is issue 31, in extender mode on one node
// of two underlay IPs.
//
// Part 1, the requeue write: a pod waiting for IPs is deleted and
// re-created under the same name (with a node selector no node matches, so
// that the new pod never reaches the extender and never waits itself);
// then an IP is freed. The requeuer touches the pod that waited, by name:
// the re-created pod must not get the condition.
//
// Part 2, a reservation that outlives its pod: the extender's pod watch
// is frozen (watchGate: events thrown away, the watch open, the extender
// ready). A pod is bound by the extender — its Binding succeeded, the
// informer never sees it bound (checked on /capacity: "reserved") — then
// deleted; kube-apiserver is restarted and the gate cut, so the informer
// resumes from before the bind, gets "too old resource version" from the
// new apiserver and relists: a list without the pod, and no event for a
// pod it never cached. The pod waiting for that IP must get it within
// seconds, and no node is ever over capacity.
func TestReservationsAfterLostWatch(t *testing.T) {
	gate := newWatchGate(t, "/api/v1/pods")
	s := startStack(t, stack.Options{
		Plane: plane.Options{Nodes: 1, Logf: t.Logf, Node: func(_ int, n *corev1.Node) {
			n.Annotations[names.UnderlayIPCapacityAnnotation] = "2"
		}},
		Extender: true,
		Prepare: func(_ context.Context, s *stack.Stack) error {
			if err := gate.connect(s); err != nil {
				return err
			}
			s.Opts.ExtenderAPIServer = gate.srv.URL
			return nil
		},
	})
	ctx := testContext(t, 8*time.Minute)
	const ns = "lost-watch"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	capacity := map[string]int{plane.NodeName(0): 2}
	watch := watchOverCommit(ctx, s, ns, capacity)
	del := func(name string) {
		t.Helper()
		if err := s.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}

	// Part 1.
	createPods(ctx, t, s, underlayPod(ns, "held-0", "held"), underlayPod(ns, "held-1", "held"))
	waitBoundWithin(ctx, t, s, ns, capacity, 2, time.Minute)
	createPods(ctx, t, s, underlayPod(ns, "again", "wait"))
	waitRejected(ctx, t, s, ns, "again")
	del("again")
	// The old pod is gone once a GET no longer finds it.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := s.Client.CoreV1().Pods(ns).Get(ctx, "again", metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	recreated := underlayPod(ns, "again", "wait")
	recreated.Spec.NodeSelector = map[string]string{"capscale.io/e2e-no-such-node": "true"}
	createPods(ctx, t, s, recreated)
	gone := `capscale_extender_requeue_writes_total{result="gone"}`
	goneBefore := scrapeCounter(ctx, t, s, gone)
	del("held-1")
	// The deleted waiter is forgotten: by the pending pods' watch, or by a
	// requeue write its UID precondition refuses, whichever comes first.
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(ns).Get(ctx, "again", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return hasFreedCondition(p) || scrapeCounter(ctx, t, s, gone) > goneBefore ||
			scrapeCounter(ctx, t, s, "capscale_extender_waiting_pods") == 0, nil
	})
	if err != nil {
		t.Fatalf("the deleted waiter was neither forgotten nor written to after an IP was freed: %v", err)
	}
	if hasFreedCondition(last) {
		t.Errorf("the re-created pod (UID %s) got the %s condition meant for the deleted one", last.UID, extender.FreedConditionType)
	}
	// kube-apiserver refuses the write as invalid (metadata.uid is
	// immutable); that is the pod gone, not an error to retry.
	if n := scrapeCounter(ctx, t, s, `capscale_extender_requeue_writes_total{result="error"}`); n != 0 {
		t.Errorf("requeue_writes_total{result=error} = %v, want 0", n)
	}
	del("again")
	waitBoundWithin(ctx, t, s, ns, capacity, 1, time.Minute)

	// Part 2.
	gate.freeze()
	createPods(ctx, t, s, underlayPod(ns, "victim", "held"))
	waitBoundWithin(ctx, t, s, ns, capacity, 2, time.Minute)
	if st := reservationState(ctx, t, s, ns, "victim"); st != "reserved" {
		t.Fatalf("the extender shows the victim as %q, want reserved: its informer must not see the bound pod", st)
	}
	createPods(ctx, t, s, underlayPod(ns, "waiter", "wait"))
	waitRejected(ctx, t, s, ns, "waiter")
	del("victim")
	if err := s.Halt("kube-apiserver", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	gate.thaw()
	if err := s.Resume(ctx, "kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	took := waitBoundWithin(ctx, t, s, ns, capacity, 2, 30*time.Second)
	if p, err := s.Client.CoreV1().Pods(ns).Get(ctx, "waiter", metav1.GetOptions{}); err != nil || p.Spec.NodeName == "" {
		t.Fatalf("waiter not bound: %v", err)
	}
	if n := scrapeCounter(ctx, t, s, `capscale_extender_reservations_reconciled_total{result="gone"}`); n < 1 {
		t.Errorf("reservations_reconciled_total{result=gone} = %v, want the victim's", n)
	}
	if st := reservationState(ctx, t, s, ns, "victim"); st != "" {
		t.Errorf("the extender still shows the deleted victim as %q", st)
	}
	assertNeverOver(ctx, t, s, ns, capacity, 2*time.Second)
	watch.check(t)
	t.Logf("the deleted pod's IP reached the waiting pod %s after kube-apiserver was back", took.Round(100*time.Millisecond))
}
