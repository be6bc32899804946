package schedplugin

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/underlay"
)

// EventsToRegister lists the events that may make a pod this plugin rejected
// fit, each with a hint that says whether it does: an assigned or nominated
// pod that held IPs went away (deleted, finished, or its nomination cleared
// or moved), a node was added, or a node's
// annotations or labels changed (where its capacity lives). kube-scheduler
// then moves the waiting pod out of its unschedulable pool at once, with no
// write to the API and no periodic flush (5 minutes by default) needed.
func (pl *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: assignedPod, ActionType: fwk.Delete}, QueueingHintFn: pl.afterPodDeleted},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}, QueueingHintFn: pl.afterNodeAdded},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.UpdateNodeAnnotation | fwk.UpdateNodeLabel}, QueueingHintFn: pl.afterNodeUpdated},
	}, nil
}

func (pl *Plugin) afterPodDeleted(logger klog.Logger, pod *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	// Before the pod it wakes is retried: see holds.deleted.
	pl.holds.deleted(oldObj)
	gone, err := as[*v1.Pod](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	if !podFreesIPs(gone, pl.drawsAll.Load()) {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("A pod holding underlay IPs went away", "pod", klog.KObj(pod), "gone", klog.KObj(gone), "node", gone.Spec.NodeName, "nominatedNode", gone.Status.NominatedNodeName)
	return fwk.Queue, nil
}

func (pl *Plugin) afterNodeAdded(logger klog.Logger, pod *v1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	node, err := as[*v1.Node](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if !reachable(pod, node) || !nodeAddedFits(underlay.PodNeed(pod), node, pl.rule) {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("A node with room for the pod's underlay IPs was added", "pod", klog.KObj(pod), "node", klog.KObj(node))
	return fwk.Queue, nil
}

func (pl *Plugin) afterNodeUpdated(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldNode, err := as[*v1.Node](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	newNode, err := as[*v1.Node](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if !reachable(pod, newNode) {
		return fwk.QueueSkip, nil
	}
	if !reachable(pod, oldNode) {
		// The pod may go there now: to it the node is new.
		oldNode = nil
	}
	if !capacityGrew(underlay.PodNeed(pod), oldNode, newNode, pl.rule) && !ipamReleased(oldNode, newNode, pl.rule) {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("A node's underlay IP capacity grew", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
	return fwk.Queue, nil
}

// reachable: the pod's nodeSelector and required node affinity admit the
// node, as NodeAffinity's Filter reads them. With SchedulerQueueingHints GA
// kube-scheduler v1.37 checks nothing before the hints
// (eventhandlers.go:90-97 passes no PreEnqueueCheck), and with
// SchedulerPopFromBackoffQ (beta, on) a pod moved is retried at once when
// nothing else waits: under a busy pool, every capacity change on any node
// retried every waiting pod, though a node the pod may not go to cannot make
// it fit (capscale-scheduler spent 18-24 ms of CPU per change at 5000 nodes,
// BENCHMARKS.md "A fresh install and a busy pool"). A selector that does
// not parse reads as reachable: a pod is never left waiting by a bug here.
func reachable(pod *v1.Pod, node *v1.Node) bool {
	if node == nil {
		return false
	}
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	return ok || err != nil
}

// as converts an event's object, unwrapping the tombstone of a delete the
// informer missed. nil stays nil. An unexpected type is an error, which the
// framework answers with Queue so that no pod is stuck by a bug here.
func as[T *v1.Pod | *v1.Node](obj any) (T, error) {
	var zero T
	if obj == nil {
		return zero, nil
	}
	obj = kube.Deleted(obj)
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("%s queueing hint: want %T, got %T", Name, zero, obj)
	}
	return t, nil
}
