package extender

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestLedgerDrawsAll (issue 49 §2): on a node whose pool draws all, the
// pod-network pods that ask for no IP take one each; hostNetwork pods take
// none; on a node that draws only marked pods they take nothing. The
// charge follows the node when its draws changes.
func TestLedgerDrawsAll(t *testing.T) {
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	all := node("a", "")
	all.Annotations = map[string]string{names.UnderlayIPSourceCapacityAnnotation: "4", names.UnderlayIPDrawsAnnotation: underlay.DrawsAll}
	l.SetNode(all)
	l.SetPod(pod("marked", "a", 1))
	l.SetPod(pod("u1", "a", 0))
	l.SetPod(pod("u2", "a", 0))
	host := pod("host", "a", 0)
	host.Spec.HostNetwork = true
	l.SetPod(host)
	if u := l.Usage("a"); u.Used != 3 || u.Free() != 1 {
		t.Fatalf("draws all: used %d free %d, want 3 and 1", u.Used, u.Free())
	}
	if got := l.Drawn("a"); got != 2 {
		t.Errorf("Drawn = %d, want 2", got)
	}
	if got := l.Requested("a"); got != 1 {
		t.Errorf("Requested = %d, want 1", got)
	}
	if got := l.VictimsFree("a", []types.UID{"uid-u1", "uid-marked"}); got != 2 {
		t.Errorf("VictimsFree = %d, want 2", got)
	}
	// The source now says only marked pods draw.
	marked := all.DeepCopy()
	marked.Annotations[names.UnderlayIPDrawsAnnotation] = underlay.DrawsMarked
	if ch := l.SetNode(marked); !ch.Changed || ch.Freed != 2 {
		t.Errorf("SetNode(marked) = %+v, want changed, 2 freed", ch)
	}
	if u := l.Usage("a"); u.Used != 1 {
		t.Errorf("draws marked: used %d, want 1", u.Used)
	}
	l.DeletePod("uid-u1")
	l.SetNode(all)
	if u := l.Usage("a"); u.Used != 2 {
		t.Errorf("after a delete: used %d, want 2", u.Used)
	}
}

// TestLedgerAwaitsTheMirror (issue 49 §4): with capacity sources
// configured, a node the mirror has not read is 0 with the reason.
func TestLedgerAwaitsTheMirror(t *testing.T) {
	l := NewLedger(LedgerOptions{DefaultCapacity: 10, AwaitCapacitySource: true})
	n := node("a", "")
	if ch := l.SetNode(n); ch.Capacity != 0 || ch.Invalid != underlay.NotReadYet {
		t.Fatalf("unread: %+v", ch)
	}
	n = n.DeepCopy()
	n.Annotations = map[string]string{names.UnderlayIPSourceAnnotation: names.UnderlayIPSourceNone}
	if ch := l.SetNode(n); ch.Capacity != 10 || ch.Freed != 10 {
		t.Fatalf("read, uncovered: %+v", ch)
	}
}
