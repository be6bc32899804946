package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// TestDeleted: a tombstone gives the object inside, anything else itself.
func TestDeleted(t *testing.T) {
	n := &corev1.Node{}
	if got := Deleted(cache.DeletedFinalStateUnknown{Key: "n", Obj: n}); got != any(n) {
		t.Errorf("tombstone: got %v, want the node inside", got)
	}
	if got := Deleted(n); got != any(n) {
		t.Errorf("plain object: got %v, want it back", got)
	}
}
