//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestRealNodeNativeReadmission: native mode publishes the capacity in the
// Node's status, and a real kubelet admits pods against it — again for
// every running pod when it restarts. With ten underlay pods running on a
// real node of ten IPs:
//   - the kubelet restarts: the capacity is published again and every pod
//     keeps running, its containers untouched;
//   - the Node object is deleted and the kubelet registers it anew (a
//     restart: a kubelet registers once): the new Node has no capacity
//     until the publisher writes it from the node's label, and no pod is
//     rejected;
//   - the kubelet's device-plugin state is lost (a re-created machine
//     that finds its Node registered: the case where a kubelet zeroes
//     extended resources it does not serve): the capacity is published
//     (v1.37.2 here does not zero it: its device manager recreates its
//     socket, which counts as a checkpoint, before it registers; if it
//     did, the publisher would write it back) and no pod is rejected;
//   - the capacity annotation turns invalid under the running pods, and
//     the checkpoint is lost again: the publisher publishes the IPs in use
//     (10), so the kubelet re-admits all ten and no new pod fits.
func TestRealNodeNativeReadmission(t *testing.T) {
	s := startRealNodeStack(t, stack.Options{Native: true}, 1)
	ctx := testContext(t, 6*time.Minute)
	node := realNode(t, s, plane.RealNodeName(0))
	waitAllocatable(ctx, t, s, map[string]int64{node.Name: 10}, time.Minute)
	const ns = "readmission"
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for i := range 11 {
		pods = append(pods, realPod(ns, fmt.Sprintf("p-%02d", i), 1))
	}
	createPods(ctx, t, s, pods...)
	waitRealState(ctx, t, s, ns, 2*time.Minute, "10 Running, 1 Pending", func(st realState) bool {
		return st.runningCount() == 10 && len(st.creating) == 0 && len(st.pending) == 1
	})
	containers := containerIDs(ctx, t, s, ns)

	forget := func() {
		if err := s.ForgetDevicePluginState(); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		name    string
		prepare func()
		want    int64
	}{
		{name: "kubelet restart", want: 10},
		{name: "Node deleted, registered again", want: 10, prepare: func() {
			node.StopKubelet()
			if err := s.Client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "device-plugin state lost", want: 10, prepare: func() {
			node.StopKubelet()
			forget()
		}},
		{name: "capacity annotation invalid under running pods, device-plugin state lost", want: 10, prepare: func() {
			annotateCapacity(ctx, t, s, node.Name, "ten")
			waitNodeEvent(ctx, t, s, node.Name, "InvalidUnderlayIPCapacity")
			node.StopKubelet()
			forget()
		}},
	} {
		t.Logf("%s", step.name)
		if step.prepare != nil {
			step.prepare()
		} else {
			node.StopKubelet()
		}
		zeroed := node.KubeletLogCount(kubeletZeroes)
		restarted := time.Now()
		if err := node.StartKubelet(ctx); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		published := waitPublished(ctx, t, s, node.Name, step.want)
		didZero := node.KubeletLogCount(kubeletZeroes) > zeroed
		t.Logf("%s: the kubelet registered, the Node is Ready and its capacity %d published %.1fs after the kubelet started (the kubelet zeroed it on registration: %v)",
			step.name, step.want, published.Sub(restarted).Seconds(), didZero)
		// The kubelet re-admits every pod it finds; give it time to
		// reject one, if it would.
		holdRunning(ctx, t, s, ns, containers, 10*time.Second)
		if rejected := admissionRejections(ctx, t, s, ns); len(rejected) > 0 {
			t.Fatalf("%s: the kubelet rejected running pods: %v", step.name, rejected)
		}
	}
	// Still no room for the eleventh pod: in use = published = 10.
	st, err := realPodState(ctx, s, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.pending) != 1 || st.runningCount() != 10 {
		t.Errorf("at the end: %s, want 10 Running and 1 Pending", st)
	}
	checkPendingReason(ctx, t, s, ns, st.pending, "Insufficient "+names.UnderlayIPResource)
}

// kubeletZeroes is what the kubelet logs when it zeroes the extended
// resources of a Node it finds registered, having no device-plugin
// checkpoint (it takes the node for re-created).
const kubeletZeroes = "Zero out resource capacity in existing node"

// containerIDs maps each Running pod of ns to its container's ID.
func containerIDs(ctx context.Context, t *testing.T, s *stack.Stack, ns string) map[string]string {
	t.Helper()
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 {
			out[p.Name] = p.Status.ContainerStatuses[0].ContainerID
		}
	}
	return out
}

// waitPublished waits until the node is Ready with want published as its
// capacity and allocatable, and returns when it saw that.
func waitPublished(ctx context.Context, t *testing.T, s *stack.Stack, node string, want int64) time.Time {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		c, a := n.Status.Capacity[names.UnderlayIPResource], n.Status.Allocatable[names.UnderlayIPResource]
		last = fmt.Sprintf("Ready %v, capacity %s, allocatable %s", plane.NodeReady(n), c.String(), a.String())
		return plane.NodeReady(n) && c.Value() == want && a.Value() == want, nil
	})
	if err != nil {
		t.Fatalf("%s: capacity %d never published: %s", node, want, last)
	}
	return time.Now()
}

// holdRunning checks for d that every pod in want stays Running with the
// same container: a rejected pod fails, a restarted one changes its ID.
func holdRunning(ctx context.Context, t *testing.T, s *stack.Stack, ns string, want map[string]string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		got := containerIDs(ctx, t, s, ns)
		var diff []string
		for p, id := range want {
			if got[p] != id {
				diff = append(diff, fmt.Sprintf("%s: %q, was %q", p, got[p], id))
			}
		}
		if len(diff) > 0 {
			sort.Strings(diff)
			t.Fatalf("running pods changed: %s", strings.Join(diff, "; "))
		}
	}
}

// admissionRejections lists the kubelet's admission rejections in ns:
// pods Failed with an OutOf<resource> or UnexpectedAdmissionError reason.
func admissionRejections(ctx context.Context, t *testing.T, s *stack.Stack, ns string) []string {
	t.Helper()
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodFailed {
			out = append(out, fmt.Sprintf("%s: %s %s", p.Name, p.Status.Reason, p.Status.Message))
		}
	}
	evs, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if strings.HasPrefix(e.Reason, "OutOf") || e.Reason == "UnexpectedAdmissionError" {
			out = append(out, fmt.Sprintf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message))
		}
	}
	return out
}
