//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/ipreport"
)

// Real nodes (plane.Options.RealNodes): a kubelet and containerd each,
// with a CNI range of exactly the node's capacity. These helpers start
// them, make pods for them and compare what the IPAM handed out with what
// capscale counts. Without root or make deps' packages, the plane refuses
// to start and the test fails saying what is missing.

// ipamExhausted is what host-local says when a node's range is used up:
// the failure capscale exists to prevent.
const ipamExhausted = "no IP addresses available in range set"

// startRealNodeStack starts o's stack with realNodes real nodes of
// capacity 10 beside one kwok node, and fails the test if cleanup leaves
// anything of them on the host.
func startRealNodeStack(t *testing.T, o stack.Options, realNodes int) *stack.Stack {
	t.Helper()
	o.Plane.Nodes, o.Plane.RealNodes, o.Plane.Logf = 1, realNodes, t.Logf
	s := startStack(t, o)
	// Runs before startStack's cleanup (which prints the logs on failure
	// and stops the plane): the host must be as the test found it.
	t.Cleanup(func() {
		if err := s.StopRealNodes(); err != nil {
			t.Errorf("real nodes' cleanup: %v", err)
		}
	})
	return s
}

// realPod is a pod for the real nodes (plane.RealNodePod), needing ips
// underlay IPs (none for 0).
func realPod(ns, name string, ips int64) *corev1.Pod {
	p := plane.RealNodePod(ns, name)
	p.Labels = map[string]string{"app": "real"}
	if ips > 0 {
		p.Spec.Containers[0].Resources.Limits = underlayRequest(ips)
	}
	return p
}

// realState is where the pods of a namespace are on the real nodes.
type realState struct {
	// running: Running pods by node, each with its pod IP.
	running map[string]map[string]netip.Addr
	// creating: bound, not yet Running; pending: not bound.
	creating, pending []string
}

func (st realState) runningCount() int {
	n := 0
	for _, ps := range st.running {
		n += len(ps)
	}
	return n
}

func (st realState) String() string {
	var b strings.Builder
	nodes := make([]string, 0, len(st.running))
	for n := range st.running {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s: %d running; ", n, len(st.running[n]))
	}
	fmt.Fprintf(&b, "%d bound not running %v, %d pending", len(st.creating), st.creating, len(st.pending))
	return b.String()
}

func realPodState(ctx context.Context, s *stack.Stack, ns string) (realState, error) {
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return realState{}, err
	}
	st := realState{running: map[string]map[string]netip.Addr{}}
	for _, p := range pods.Items {
		switch {
		case p.DeletionTimestamp != nil:
		case p.Spec.NodeName == "":
			st.pending = append(st.pending, p.Name)
		case p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "":
			ip, err := netip.ParseAddr(p.Status.PodIP)
			if err != nil {
				return st, fmt.Errorf("pod %s has IP %q: %w", p.Name, p.Status.PodIP, err)
			}
			if st.running[p.Spec.NodeName] == nil {
				st.running[p.Spec.NodeName] = map[string]netip.Addr{}
			}
			st.running[p.Spec.NodeName][p.Name] = ip
		default:
			st.creating = append(st.creating, p.Name)
		}
	}
	sort.Strings(st.creating)
	sort.Strings(st.pending)
	return st, nil
}

// waitRealState polls until ok says the state is reached.
func waitRealState(ctx context.Context, t *testing.T, s *stack.Stack, ns string, timeout time.Duration, what string, ok func(realState) bool) realState {
	t.Helper()
	var st realState
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if st, err = realPodState(ctx, s, ns); err != nil {
			return false, nil
		}
		return ok(st), nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: %v; at the end: %s", timeout, what, err, st)
	}
	return st
}

// realNode returns the real node named name.
func realNode(t *testing.T, s *stack.Stack, name string) *plane.RealNode {
	t.Helper()
	for _, n := range s.RealNodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no real node %s", name)
	return nil
}

// checkRunningIPs checks that every Running pod's IP is in its node's
// range and that the IPAM of each of nodes handed out exactly those IPs.
func checkRunningIPs(t *testing.T, nodes []*plane.RealNode, st realState) {
	t.Helper()
	for _, n := range nodes {
		want := map[netip.Addr]string{}
		for pod, ip := range st.running[n.Name] {
			if !n.InRange(ip) {
				t.Errorf("pod %s on %s has IP %s, outside the node's range %s-%s", pod, n.Name, ip, n.RangeStart, n.RangeEnd)
			}
			want[ip] = pod
		}
		got, err := n.AllocatedIPs()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: the IPAM handed out %v, the Running pods hold %v", n.Name, got, want)
			continue
		}
		for _, ip := range got {
			if _, ok := want[ip]; !ok {
				t.Errorf("%s: the IPAM handed out %s, which no Running pod holds (pods: %v)", n.Name, ip, want)
			}
		}
	}
}

// sandboxFailures returns the FailedCreatePodSandBox events of ns whose
// message contains want.
func sandboxFailures(ctx context.Context, s *stack.Stack, ns, want string) ([]string, error) {
	evs, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreatePodSandBox"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range evs.Items {
		if strings.Contains(e.Message, want) {
			out = append(out, e.InvolvedObject.Name+": "+e.Message)
		}
	}
	return out, nil
}

// ipamWatch compares, on every real node at every poll, the IPs the IPAM
// has handed out (host-local's allocation files) with capscale's count of
// the node's IPs (internal/ipreport: the rule every mode applies, as
// kubectl capscale ips shows it: its holders, or what the node's IPAM
// reports in use when that is more) and the node's capacity. A pod holds
// capscale's count from its binding and gets its IP a moment later; it
// gives the IP back when its sandbox stops, before it stops counting. So
// at every poll: IPAM ≤ capscale ≤ capacity; once settled, equal.
type ipamWatch struct {
	nodes      []*plane.RealNode
	mu         sync.Mutex
	polls      int
	violations []string
	last       map[string][2]int // node -> {ipam, capscale}
	stop       context.CancelFunc
	done       chan struct{}
}

// watchIPAM watches nodes (those whose every pod is an underlay pod).
func watchIPAM(ctx context.Context, t *testing.T, s *stack.Stack, nodes []*plane.RealNode) *ipamWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &ipamWatch{nodes: nodes, stop: cancel, done: make(chan struct{}), last: map[string][2]int{}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			w.poll(ctx, s)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *ipamWatch) poll(ctx context.Context, s *stack.Stack) {
	// capscale's count before and after the IPAM's: an IP held when the
	// IPAM is read belongs to a pod counted at that moment, so counted in
	// one of the two reads (it cannot both bind and go in between).
	before, err := capscaleHolders(ctx, s)
	if err != nil {
		return
	}
	ipam := map[string]int{}
	for _, n := range w.nodes {
		ips, err := n.AllocatedIPs()
		if err != nil {
			return
		}
		ipam[n.Name] = len(ips)
	}
	after, err := capscaleHolders(ctx, s)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	for _, n := range after.Nodes {
		got, real := ipam[n.Name]
		if !real {
			continue
		}
		held := map[ipreport.Pod]bool{}
		// What the IPAM reports in use (a capacity source's used or
		// usedFrom), which capscale charges when it exceeds the holders:
		// a force-deleted pod's IP until its sandbox is torn down.
		var reported int64
		for _, b := range append(slices.Clone(before.Nodes), n) {
			if b.Name != n.Name {
				continue
			}
			for _, p := range b.Holders {
				held[p] = true
			}
			if b.IPAMUsed != nil {
				reported = max(reported, *b.IPAMUsed)
			}
		}
		w.last[n.Name] = [2]int{got, int(n.Used)}
		if int64(got) > max(int64(len(held)), reported) || n.Used > n.Capacity {
			w.violations = append(w.violations, fmt.Sprintf("%s: the IPAM handed out %d, capscale counts %d (%d around the read; its report %d) of capacity %d",
				n.Name, got, n.Used, len(held), reported, n.Capacity))
		}
	}
}

// capscaleHolders is capscale's count of every node's underlay IPs: the
// rule every mode applies (internal/ipreport), over the cluster's Nodes and
// Pods, as kubectl capscale ips shows it.
func capscaleHolders(ctx context.Context, s *stack.Stack) (ipreport.Report, error) {
	nodes, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ipreport.Report{}, err
	}
	pods, err := s.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ipreport.Report{}, err
	}
	var np []*corev1.Node
	for i := range nodes.Items {
		np = append(np, &nodes.Items[i])
	}
	var pp []*corev1.Pod
	for i := range pods.Items {
		pp = append(pp, &pods.Items[i])
	}
	return ipreport.Build(np, pp, 10, ipreport.AllNodes), nil
}

// end stops the watch (once).
func (w *ipamWatch) end() {
	w.stop()
	<-w.done
}

// check fails the test on any poll where the IPAM handed out more than
// capscale counted or capscale counted more than the capacity, and
// returns the number of polls.
func (w *ipamWatch) check(t *testing.T) int {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		t.Errorf("%d of %d polls broke IPAM ≤ capscale ≤ capacity; first: %s", len(w.violations), w.polls, w.violations[0])
	}
	if w.polls < 5 {
		t.Errorf("only %d polls of the IPAM", w.polls)
	}
	return w.polls
}

// settled says whether, at the last poll, every real node's IPAM count
// equals capscale's and want.
func (w *ipamWatch) settled(want int) (bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ok := len(w.last) > 0
	var parts []string
	for n, v := range w.last {
		parts = append(parts, fmt.Sprintf("%s: IPAM %d, capscale %d", n, v[0], v[1]))
		ok = ok && v[0] == want && v[1] == want
	}
	sort.Strings(parts)
	return ok, strings.Join(parts, "; ")
}

// waitIPAMStuck waits until running pods of ns run and stuck more are bound
// and stuck, each with a sandbox failure whose message holds ipamError (the
// IPAM's own words), and returns that state.
func waitIPAMStuck(ctx context.Context, t *testing.T, s *stack.Stack, ns string, timeout time.Duration, running, stuck int, ipamError string) realState {
	t.Helper()
	what := fmt.Sprintf("%d Running and %d stuck with %q", running, stuck, ipamError)
	return waitRealState(ctx, t, s, ns, timeout, what, func(st realState) bool {
		if st.runningCount() != running || len(st.creating) != stuck {
			return false
		}
		failed, err := sandboxFailures(ctx, s, ns, ipamError)
		if err != nil {
			return false
		}
		met := map[string]bool{}
		for _, f := range failed {
			for _, p := range st.creating {
				if strings.HasPrefix(f, p+":") {
					met[p] = true
				}
			}
		}
		return len(met) == stuck
	})
}

// runningOn is the pods of ns now, and the names of those Running on node,
// sorted.
func runningOn(ctx context.Context, t *testing.T, s *stack.Stack, ns, node string) (realState, []string) {
	t.Helper()
	st, err := realPodState(ctx, s, ns)
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(maps.Keys(st.running[node]))
	return st, names
}
