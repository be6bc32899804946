package provider

import (
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// ScaleTracker remembers when this process saw a workload's spec.replicas
// change. It is the fallback for "last scaled" when no HPA with a
// status.lastScaleTime targets the workload; it starts empty, so right after
// a restart no step is held back by it.
type ScaleTracker struct {
	clock clock.PassiveClock
	mu    sync.RWMutex
	last  map[workloadKey]time.Time
}

type workloadKey struct{ kind, namespace, name string }

// NewScaleTracker returns an empty tracker.
func NewScaleTracker(clk clock.PassiveClock) *ScaleTracker {
	return &ScaleTracker{clock: clk, last: map[workloadKey]time.Time{}}
}

// LastChange returns when spec.replicas was last seen to change, or the zero
// time.
func (t *ScaleTracker) LastChange(kind, namespace, name string) time.Time {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.last[workloadKey{kind, namespace, name}]
}

func (t *ScaleTracker) observe(kind string, oldObj, newObj any) {
	ns, name, before, ok1 := replicasOf(oldObj)
	_, _, after, ok2 := replicasOf(newObj)
	if !ok1 || !ok2 || before == after {
		return
	}
	now := t.clock.Now()
	t.mu.Lock()
	t.last[workloadKey{kind, ns, name}] = now
	t.mu.Unlock()
}

func (t *ScaleTracker) forget(kind string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	ns, name, _, ok := replicasOf(obj)
	if !ok {
		return
	}
	t.mu.Lock()
	delete(t.last, workloadKey{kind, ns, name})
	t.mu.Unlock()
}

// handler returns informer callbacks for one workload kind.
func (t *ScaleTracker) handler(kind string) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) { t.observe(kind, oldObj, newObj) },
		DeleteFunc: func(obj any) { t.forget(kind, obj) },
	}
}

func replicasOf(obj any) (namespace, name string, replicas int32, ok bool) {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return w.Namespace, w.Name, specReplicas(w.Spec.Replicas), true
	case *appsv1.StatefulSet:
		return w.Namespace, w.Name, specReplicas(w.Spec.Replicas), true
	default:
		return "", "", 0, false
	}
}

// specReplicas applies the API default of 1 for an unset spec.replicas.
func specReplicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}
