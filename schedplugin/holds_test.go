package schedplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// usedInfo is a NodeInfo with its Node and the underlay IPs its pods hold.
type usedInfo struct {
	fwk.NodeInfo
	node *v1.Node
	used int64
	// pods, if set, are the node's pods (their requests are in used).
	pods []*v1.Pod
}

func (n usedInfo) Node() *v1.Node { return n.node }

func (n usedInfo) GetPods() []fwk.PodInfo {
	out := make([]fwk.PodInfo, 0, len(n.pods))
	for _, p := range n.pods {
		out = append(out, podInfo{pod: p})
	}
	return out
}

// podInfo is a PodInfo that only has its pod.
type podInfo struct {
	fwk.PodInfo
	pod *v1.Pod
}

func (p podInfo) GetPod() *v1.Pod { return p.pod }
func (n usedInfo) GetRequested() fwk.Resource {
	return fakeResource{scalar: map[v1.ResourceName]int64{underlay.Resource: n.used}}
}

// heldPlugin is a plugin whose holds end only when the test says so.
func heldPlugin() (pl *Plugin, timers map[time.Duration][]func(), activated *[]string) {
	timers = map[time.Duration][]func(){}
	activated = &[]string{}
	h := newHolds(func(pods map[string]*v1.Pod) {
		for k := range pods {
			*activated = append(*activated, k)
		}
	})
	h.after = func(d time.Duration, f func()) { timers[d] = append(timers[d], f) }
	return &Plugin{rule: underlay.Rule{Default: 10}, holds: h}, timers, activated
}

// forceDeleted is a running pod as a grace-0 delete leaves it: the
// apiserver wrote deletionGracePeriodSeconds 0 before removing it.
func forceDeleted(p *v1.Pod) *v1.Pod {
	p = p.DeepCopy()
	now := metav1.Now()
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, ptr.To[int64](0)
	p.Status.Phase = v1.PodRunning
	return p
}

func filter(pl *Plugin, pod *v1.Pod, node *v1.Node, used int64) *fwk.Status {
	return pl.Filter(context.Background(), nil, pod, usedInfo{node: node, used: used})
}

// TestForceDeletedPodHeld: a full node (10 of 10) loses a pod to a force
// delete; kube-scheduler's NodeInfo then counts 9, but the node still holds
// the IP until the kubelet's kill reaches the sandbox: Filter refuses,
// until the hold ends, and the pod it turned away is activated then.
func TestForceDeletedPodHeld(t *testing.T) {
	pl, timers, activated := heldPlugin()
	node := ipNode("n1", "10")
	waiting := ipPod("waiting", "", 1)
	gone := forceDeleted(ipPod("gone", "n1", 1))

	pl.holds.deleted(gone)
	st := filter(pl, waiting, node, 9)
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "held for force-deleted pods") {
		t.Fatalf("Filter during the hold = %v, want Unschedulable naming the hold", st)
	}
	if got := len(timers[underlay.MinKillGrace+underlay.TeardownAllowance]); got != 1 {
		t.Fatalf("timers %v, want one of %v", timers, underlay.MinKillGrace+underlay.TeardownAllowance)
	}
	if s, _ := pl.Score(context.Background(), nil, waiting, usedInfo{node: node, used: 9}); s != 0 {
		t.Errorf("Score during the hold = %d, want 0 free", s)
	}
	// The hint sees the same delete: no second hold.
	pl.holds.deleted(gone)
	if got := pl.holds.on("n1"); got != 1 {
		t.Fatalf("held %d, want 1", got)
	}
	for _, f := range timers[underlay.MinKillGrace+underlay.TeardownAllowance] {
		f()
	}
	if len(*activated) != 1 || (*activated)[0] != "default/waiting" {
		t.Fatalf("activated %v, want the pod the hold turned away", *activated)
	}
	if st := filter(pl, waiting, node, 9); !st.IsSuccess() {
		t.Fatalf("Filter after the hold = %v, want success", st)
	}
}

// TestGracefulDeleteNotHeld: the kubelet finished the pod (a filtered
// watch reports its previous object, terminating with its grace), or the
// object went terminal: the IP is back, no hold.
func TestGracefulDeleteNotHeld(t *testing.T) {
	graceful := ipPod("graceful", "n1", 1)
	now := metav1.Now()
	graceful.DeletionTimestamp, graceful.DeletionGracePeriodSeconds = &now, ptr.To[int64](30)
	terminal := forceDeleted(ipPod("done", "n1", 1))
	terminal.Status.Phase = v1.PodSucceeded
	for _, p := range []*v1.Pod{graceful, terminal, ipPod("finished", "n1", 1), forceDeleted(ipPod("no-ip", "n1", 0))} {
		pl, timers, _ := heldPlugin()
		pl.holds.deleted(p)
		if pl.holds.on("n1") != 0 || len(timers) != 0 {
			t.Errorf("%s: held %d, want none", p.Name, pl.holds.on("n1"))
		}
		if st := filter(pl, ipPod("waiting", "", 1), ipNode("n1", "10"), 9); !st.IsSuccess() {
			t.Errorf("%s: Filter = %v, want success", p.Name, st)
		}
	}
}

// TestHoldHintAndNodeGone: the delete's queueing hint starts the hold
// (it runs before the pod it wakes is retried), and a deleted node ends
// its holds.
func TestHoldHintAndNodeGone(t *testing.T) {
	pl, _, _ := heldPlugin()
	gone := forceDeleted(ipPod("gone", "n1", 2))
	if h, err := hint(t, pl, fwk.ClusterEvent{Resource: assignedPod, ActionType: fwk.Delete}, ipPod("waiting", "", 1), cache.DeletedFinalStateUnknown{Obj: gone}, nil); err != nil || h != fwk.Queue {
		t.Fatalf("hint = %v, %v; want Queue", h, err)
	}
	if got := pl.holds.on("n1"); got != 2 {
		t.Fatalf("held %d after the hint, want 2", got)
	}
	pl.holds.nodeGone("n1")
	if got := pl.holds.on("n1"); got != 0 {
		t.Fatalf("held %d after the node went, want 0", got)
	}
}

// TestIPAMReportCharged: with the IPAM's report on the node, the node is
// charged the larger of it and the pods, holds aside; the mirror lowering
// the report is an event that requeues.
func TestIPAMReportCharged(t *testing.T) {
	pl, _, _ := heldPlugin()
	pl.holds.deleted(forceDeleted(ipPod("gone", "n1", 1)))
	reported := func(used string) *v1.Node {
		return capNode("n1", map[string]string{names.UnderlayIPCapacityAnnotation: "10", names.UnderlayIPSourceUsedAnnotation: used}, nil)
	}
	st := filter(pl, ipPod("waiting", "", 1), reported("10"), 9)
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "the IPAM reports 10 in use") {
		t.Fatalf("Filter with the IPAM at 10 = %v, want Unschedulable naming the IPAM", st)
	}
	if st := filter(pl, ipPod("waiting", "", 1), reported("9"), 9); st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "held for force-deleted pods") {
		t.Fatalf("Filter with the IPAM at 9 = %v, want Unschedulable naming the hold: a report the mirror wrote before the delete cannot show its IP", st)
	}
	if st := filter(pl, ipPod("waiting", "", 1), reported("9"), 8); !st.IsSuccess() {
		t.Fatalf("Filter with the IPAM at 9, pods 8 and the hold = %v, want success", st)
	}
	if st := filter(pl, ipPod("waiting", "", 1), reported("10"), 2); st.IsSuccess() {
		t.Fatalf("Filter with the IPAM at 10 and pods at 2 = success, want refused: used > held")
	}
	upd := fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.UpdateNodeAnnotation | fwk.UpdateNodeLabel}
	for _, tc := range []struct {
		from, to string
		want     fwk.QueueingHint
	}{{"10", "9", fwk.Queue}, {"9", "10", fwk.QueueSkip}, {"9", "9", fwk.QueueSkip}} {
		if h, _ := hint(t, pl, upd, ipPod("waiting", "", 1), reported(tc.from), reported(tc.to)); h != tc.want {
			t.Errorf("used %s -> %s: hint %v, want %v", tc.from, tc.to, h, tc.want)
		}
	}
}

// TestHoldDrawsCharge: once a node that draws all was read, a force-deleted
// pod-network pod that asked for no IP is held for its draws charge: one IP
// on a node that draws all, none on a node that draws only marked pods.
func TestHoldDrawsCharge(t *testing.T) {
	pl, timers, _ := heldPlugin()
	pl.holds.drawsAll = func() bool { return true }
	pl.holds.deleted(forceDeleted(ipPod("unasked", "n1", 0)))
	if got := len(timers[underlay.MinKillGrace+underlay.TeardownAllowance]); got != 1 {
		t.Fatalf("timers %v, want one hold", timers)
	}
	if got := pl.holds.chargeOn("n1", underlay.Capacity{IPs: 10, DrawsAll: true}); got != 1 {
		t.Fatalf("held on a draws-all node %d, want 1", got)
	}
	if got := pl.holds.on("n1"); got != 0 {
		t.Fatalf("held on a draws-marked node %d, want 0", got)
	}
	for _, f := range timers[underlay.MinKillGrace+underlay.TeardownAllowance] {
		f()
	}
	if got := pl.holds.chargeOn("n1", underlay.Capacity{IPs: 10, DrawsAll: true}); got != 0 {
		t.Fatalf("held after the hold %d, want 0", got)
	}
}

// TestIPAMReportUnion is issue 55 §3 in the plugin: a node of 4 whose IPAM
// lists 3 (two running pods, and a force-deleted pod's IP its CNI DEL has
// not given back). The replacement is assumed or bound before its CNI ADD,
// so no IPAM can list it: the node is full. The larger of the two counts
// (pods 3, IPAM 3) left one IP free, and the sandbox of one of the last
// two pods would have failed for want of an IP.
func TestIPAMReportUnion(t *testing.T) {
	pl, _, _ := heldPlugin()
	node := capNode("n1", map[string]string{names.UnderlayIPCapacityAnnotation: "4", names.UnderlayIPSourceUsedAnnotation: "3"}, nil)
	withIP := func(p *v1.Pod) *v1.Pod {
		p.Status.PodIPs = []v1.PodIP{{IP: "192.0.2.10"}}
		return p
	}
	pods := []*v1.Pod{withIP(ipPod("p1", "n1", 1)), withIP(ipPod("p2", "n1", 1)), ipPod("b", "n1", 1)}
	st := pl.Filter(context.Background(), nil, ipPod("c", "", 1), usedInfo{node: node, used: 3, pods: pods})
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "1 of the pods' 3 have no IP yet") {
		t.Fatalf("Filter = %v, want Unschedulable naming the pod with no IP yet", st)
	}
	pods[2] = withIP(pods[2])
	if st := pl.Filter(context.Background(), nil, ipPod("c", "", 1), usedInfo{node: node, used: 3, pods: pods}); !st.IsSuccess() {
		t.Fatalf("Filter once b has its IP = %v, want success", st)
	}
	if got, _ := pl.Score(context.Background(), nil, ipPod("c", "", 1), usedInfo{node: node, used: 3, pods: pods[:2]}); got != 1 {
		t.Fatalf("Score with the IPAM at 3 and 2 pods = %d, want 1 free", got)
	}
}
