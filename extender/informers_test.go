package extender

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/internal/underlay"
)

func TestStripPod(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	now := metav1.Now()
	full := pod("p", "a", 2)
	full.Labels = map[string]string{"app": "x"}
	full.Annotations = map[string]string{"big": "annotation"}
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	full.DeletionTimestamp = &now
	full.Spec.Containers[0].Image = "registry.example.com/app:v1"
	full.Spec.Containers[0].Env = []v1.EnvVar{{Name: "A", Value: "B"}}
	full.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
	full.Spec.InitContainers = []v1.Container{{Name: "sidecar", RestartPolicy: &always, Resources: v1.ResourceRequirements{
		Limits: v1.ResourceList{underlay.Resource: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")}}}}
	full.Spec.Overhead = v1.ResourceList{underlay.Resource: resource.MustParse("1"), v1.ResourceCPU: resource.MustParse("100m")}
	full.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady}}

	obj, err := StripPod(full)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := obj.(*CachedPod)
	if !ok {
		t.Fatalf("StripPod returned %T, want *CachedPod", obj)
	}
	if got.Name != "p" || got.Namespace != "ns" || got.UID != full.UID || got.NodeName != "a" ||
		got.Phase != v1.PodRunning || got.DeletionTimestamp == nil || got.ResourceVersion != full.ResourceVersion {
		t.Errorf("identity, node or phase lost: %+v", got)
	}
	if got.Labels != nil || got.Annotations != nil || got.ManagedFields != nil || got.OwnerReferences != nil {
		t.Errorf("kept more than needed: %+v", got)
	}
	if got.Need != underlay.PodNeed(full) || underlay.PodNeed(full) != 4 {
		t.Errorf("need %d cached, %d of the full pod, want 4", got.Need, underlay.PodNeed(full))
	}
	cp := got.DeepCopyObject().(*CachedPod)
	cp.DeletionTimestamp.Time = cp.DeletionTimestamp.Add(time.Hour)
	if !got.DeletionTimestamp.Equal(&now) {
		t.Error("DeepCopyObject shares the deletion timestamp")
	}
	if full.Labels == nil {
		t.Error("the input was modified")
	}

	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: full}
	if obj, err := StripPod(tomb); err != nil || obj != any(tomb) {
		t.Errorf("non-pods must pass through: %v %v", obj, err)
	}
}

func TestLedgerReleasesOnTombstoneOfCachedPod(t *testing.T) {
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	l.SetNode(node("a", ""))
	cp := Compact(pod("p", "a", 3))
	tr := &Tracker{Ledger: l, Metrics: NewMetrics(nil)}
	tr.onPod(cp)
	if used := l.Report().Totals.Used; used != 3 {
		t.Fatalf("used %d after add, want 3", used)
	}
	tr.onPodDelete(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: cp})
	if used := l.Report().Totals.Used; used != 0 {
		t.Errorf("used %d after a tombstone delete, want 0", used)
	}
}

// TestPendingGone: a pod that leaves the pending informer without being
// bound was deleted, and the waiting set forgets it (the soak found the set
// holding pods deleted while pending for up to 15 minutes); one found in
// the bound-pod cache was bound, and stays for SetPod to settle.
func TestPendingGone(t *testing.T) {
	w := NewWaiting(nil)
	var waited []time.Duration
	tr := &Tracker{Ledger: NewLedger(LedgerOptions{DefaultCapacity: 10}), Waiting: w, Metrics: NewMetrics(nil),
		after: func(d time.Duration, f func()) { waited = append(waited, d); f() }}
	w.Rejected("uid-deleted", "ns", "deleted", 0, 1)
	w.Rejected("uid-bound", "ns", "bound", 0, 1)
	w.Rejected("uid-tomb", "ns", "tomb", 0, 1)
	boundCache := map[string]*CachedPod{"ns/bound": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bound", UID: "uid-bound"}, NodeName: "a"}}
	lookup := func(ns, name string) (*CachedPod, bool) { p, ok := boundCache[ns+"/"+name]; return p, ok }
	meta := func(name string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	}
	tr.pendingGone(meta("deleted"), lookup)
	tr.pendingGone(meta("bound"), lookup)
	tr.pendingGone(cache.DeletedFinalStateUnknown{Key: "ns/tomb", Obj: meta("tomb")}, lookup)
	if n := w.Len(); n != 1 {
		t.Errorf("waiting set holds %d pods, want 1: the bound one, for SetPod", n)
	}
	if len(waited) != 3 || waited[0] != PendingGrace {
		t.Errorf("checks deferred by %v, want each by PendingGrace: the bound pod's event may come second", waited)
	}
	// The one left is the bound one: once it is not in the bound cache
	// either, it goes too.
	tr.pendingGone(meta("bound"), func(string, string) (*CachedPod, bool) { return nil, false })
	if n := w.Len(); n != 0 {
		t.Errorf("waiting set holds %d pods, want none", n)
	}
}

// TestTrackerTellsUsageChanged: each event of a pod needing IPs on a node
// is passed on after the ledger applied it, deletes and tombstones too;
// so is a pod on the pod network that needs none (a draws-all node charges
// it); hostNetwork pods needing none, and pods not bound, are not.
func TestTrackerTellsUsageChanged(t *testing.T) {
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	l.SetNode(node("a", ""))
	var told []string
	tr := &Tracker{Ledger: l, Metrics: NewMetrics(nil), UsageChanged: func(n string) {
		told = append(told, fmt.Sprintf("%s:%d", n, l.Usage(n).Used))
	}}
	tr.onPod(pod("pending", "", 1))
	tr.onPod(pod("plain", "a", 0))
	host := pod("host", "a", 0)
	host.Spec.HostNetwork = true
	tr.onPod(host)
	tr.onPod(pod("p", "a", 3))
	tr.onPod(Compact(pod("q", "a", 1)))
	tr.onPodDelete(pod("p", "a", 3))
	tr.onPodDelete(cache.DeletedFinalStateUnknown{Key: "ns/q", Obj: Compact(pod("q", "a", 1))})
	want := []string{"a:0", "a:3", "a:4", "a:1", "a:0"}
	if fmt.Sprint(told) != fmt.Sprint(want) {
		t.Fatalf("told %v, want %v (node:used after each event)", told, want)
	}
}
