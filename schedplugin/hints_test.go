package schedplugin

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

func TestEventsToRegister(t *testing.T) {
	pl := &Plugin{rule: underlay.Rule{Default: 10}}
	events, err := pl.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[fwk.ClusterEvent]bool{
		{Resource: assignedPod, ActionType: fwk.Delete}:                                  true,
		{Resource: fwk.Node, ActionType: fwk.Add}:                                        true,
		{Resource: fwk.Node, ActionType: fwk.UpdateNodeAnnotation | fwk.UpdateNodeLabel}: true,
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), events)
	}
	for _, e := range events {
		if !want[e.Event] {
			t.Errorf("unexpected event %s", e.Event.Label())
		}
		if e.QueueingHintFn == nil {
			t.Errorf("event %s has no queueing hint: every such event would requeue every pod the plugin rejected", e.Event.Label())
		}
	}
}

// hint runs the plugin's hint for event ev, as the scheduling queue does.
func hint(t *testing.T, pl *Plugin, ev fwk.ClusterEvent, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	t.Helper()
	events, _ := pl.EventsToRegister(context.Background())
	for _, e := range events {
		if e.Event == ev {
			return e.QueueingHintFn(klog.Background(), pod, oldObj, newObj)
		}
	}
	t.Fatalf("no hint registered for %s", ev.Label())
	return 0, nil
}

// hintCase is one event and the hint the plugin must give a waiting pod.
type hintCase struct {
	name string
	// pod waits; nil is checkHints' pod.
	pod            *v1.Pod
	event          fwk.ClusterEvent
	oldObj, newObj any
	want           fwk.QueueingHint
	wantErr        bool
}

// checkHints runs each case's hint for its pod, or for pod.
func checkHints(t *testing.T, pod *v1.Pod, tests []hintCase) {
	t.Helper()
	pl := &Plugin{rule: underlay.Rule{Default: 10}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.pod
			if p == nil {
				p = pod
			}
			got, err := hint(t, pl, tc.event, p, tc.oldObj, tc.newObj)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("hint = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestQueueingHints(t *testing.T) {
	podDeleted := fwk.ClusterEvent{Resource: assignedPod, ActionType: fwk.Delete}
	nodeAdded := fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}
	nodeUpdated := fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.UpdateNodeAnnotation | fwk.UpdateNodeLabel}
	checkHints(t, ipPod("waiting", "", 2), []hintCase{
		{name: "pod holding IPs deleted", event: podDeleted, oldObj: ipPod("holder", "n1", 1), want: fwk.Queue},
		{name: "pod holding IPs deleted, seen late (tombstone)", event: podDeleted,
			oldObj: cache.DeletedFinalStateUnknown{Key: "default/holder", Obj: ipPod("holder", "n1", 1)}, want: fwk.Queue},
		{name: "pod without IPs deleted", event: podDeleted, oldObj: ipPod("plain", "n1", 0), want: fwk.QueueSkip},
		{name: "unbound pod deleted", event: podDeleted, oldObj: ipPod("pending", "", 1), want: fwk.QueueSkip},
		{name: "nominated pod deleted, or its nomination cleared or moved", event: podDeleted, oldObj: nominated(ipPod("nominee", "", 1), "n1"), want: fwk.Queue},
		{name: "nominated pod without IPs deleted", event: podDeleted, oldObj: nominated(ipPod("nominee", "", 0), "n1"), want: fwk.QueueSkip},
		{name: "not a pod: error, so the queue requeues", event: podDeleted, oldObj: capNode("n1", nil, nil), want: fwk.Queue, wantErr: true},

		{name: "node added with the default capacity", event: nodeAdded, newObj: capNode("n2", nil, nil), want: fwk.Queue},
		{name: "node added with room for the need", event: nodeAdded, newObj: capNode("n2", annotated("2"), nil), want: fwk.Queue},
		{name: "node added too small for the need", event: nodeAdded, newObj: capNode("n2", annotated("1"), nil), want: fwk.QueueSkip},
		{name: "node added with capacity 0", event: nodeAdded, newObj: capNode("n2", annotated("0"), nil), want: fwk.QueueSkip},
		{name: "node added with an invalid capacity", event: nodeAdded, newObj: capNode("n2", annotated("x"), nil), want: fwk.QueueSkip},

		{name: "capacity annotation raised", event: nodeUpdated,
			oldObj: capNode("n1", annotated("3"), nil), newObj: capNode("n1", annotated("5"), nil), want: fwk.Queue},
		{name: "capacity label raised", event: nodeUpdated,
			oldObj: capNode("n1", nil, annotated("3")), newObj: capNode("n1", nil, annotated("5")), want: fwk.Queue},
		{name: "invalid capacity fixed", event: nodeUpdated,
			oldObj: capNode("n1", annotated("x"), nil), newObj: capNode("n1", annotated("3"), nil), want: fwk.Queue},
		{name: "annotation removed, default is larger", event: nodeUpdated,
			oldObj: capNode("n1", annotated("3"), nil), newObj: capNode("n1", nil, nil), want: fwk.Queue},
		{name: "capacity lowered", event: nodeUpdated,
			oldObj: capNode("n1", annotated("5"), nil), newObj: capNode("n1", annotated("3"), nil), want: fwk.QueueSkip},
		{name: "capacity raised but still below the need", event: nodeUpdated,
			oldObj: capNode("n1", annotated("0"), nil), newObj: capNode("n1", annotated("1"), nil), want: fwk.QueueSkip},
		{name: "capacity made invalid", event: nodeUpdated,
			oldObj: capNode("n1", annotated("3"), nil), newObj: capNode("n1", annotated("x"), nil), want: fwk.QueueSkip},
		{name: "another annotation changed", event: nodeUpdated,
			oldObj: capNode("n1", map[string]string{"a": "1"}, nil), newObj: capNode("n1", map[string]string{"a": "2"}, nil), want: fwk.QueueSkip},
		{name: "capacity source's mirrored value raised", event: nodeUpdated,
			oldObj: capNode("n1", mirrored("1"), nil), newObj: capNode("n1", mirrored("4"), nil), want: fwk.Queue},
		{name: "capacity source's invalid value fixed", event: nodeUpdated,
			oldObj: capNode("n1", mirrored("invalid: no object"), nil), newObj: capNode("n1", mirrored("2"), nil), want: fwk.Queue},
		{name: "capacity source's value lowered", event: nodeUpdated,
			oldObj: capNode("n1", mirrored("4"), nil), newObj: capNode("n1", mirrored("3"), nil), want: fwk.QueueSkip},
		{name: "capacity source's value raised under the per-node annotation", event: nodeUpdated,
			oldObj: capNode("n1", map[string]string{names.UnderlayIPCapacityAnnotation: "1", names.UnderlayIPSourceCapacityAnnotation: "1"}, nil),
			newObj: capNode("n1", map[string]string{names.UnderlayIPCapacityAnnotation: "1", names.UnderlayIPSourceCapacityAnnotation: "9"}, nil), want: fwk.QueueSkip},
		{name: "label overridden by the annotation is raised", event: nodeUpdated,
			oldObj: capNode("n1", annotated("1"), annotated("3")), newObj: capNode("n1", annotated("1"), annotated("9")), want: fwk.QueueSkip},
	})
}

// mirrored is a capacity source's value as capscale-controller mirrors it.
func mirrored(v string) map[string]string {
	return map[string]string{names.UnderlayIPSourceCapacityAnnotation: v, names.UnderlayIPSourceAnnotation: "s things.example.com/n1"}
}

// nominated is pod with status.nominatedNodeName set to node.
func nominated(pod *v1.Pod, node string) *v1.Pod {
	pod.Status.NominatedNodeName = node
	return pod
}

// TestQueueingHintsReach: a change on a node the waiting pod's nodeSelector
// or required node affinity keeps it from never queues it; a node that
// comes within reach with room does.
func TestQueueingHintsReach(t *testing.T) {
	nodeAdded := fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}
	nodeUpdated := fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.UpdateNodeAnnotation | fwk.UpdateNodeLabel}
	pinned := ipPod("pinned", "", 2)
	pinned.Spec.NodeSelector = map[string]string{"pool": "a"}
	// requiring is a pod whose required node affinity is pool <op> a.
	requiring := func(name string, op v1.NodeSelectorOperator) *v1.Pod {
		p := ipPod(name, "", 2)
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
			NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "pool", Operator: op, Values: []string{"a"}}}}}}}}
		return p
	}
	byAffinity, broken := requiring("by-affinity", v1.NodeSelectorOpIn), requiring("broken", "Near")
	inA := map[string]string{"pool": "a"}
	inB := map[string]string{"pool": "b"}
	checkHints(t, nil, []hintCase{
		{name: "capacity raised on a node the nodeSelector excludes", pod: pinned, event: nodeUpdated,
			oldObj: capNode("n1", annotated("1"), inB), newObj: capNode("n1", annotated("5"), inB), want: fwk.QueueSkip},
		{name: "capacity raised on a node the nodeSelector names", pod: pinned, event: nodeUpdated,
			oldObj: capNode("n1", annotated("1"), inA), newObj: capNode("n1", annotated("5"), inA), want: fwk.Queue},
		{name: "capacity raised on a node the required affinity excludes", pod: byAffinity, event: nodeUpdated,
			oldObj: capNode("n1", annotated("1"), inB), newObj: capNode("n1", annotated("5"), inB), want: fwk.QueueSkip},
		{name: "capacity raised on a node the required affinity admits", pod: byAffinity, event: nodeUpdated,
			oldObj: capNode("n1", annotated("1"), inA), newObj: capNode("n1", annotated("5"), inA), want: fwk.Queue},
		{name: "a node with room relabeled into the nodeSelector", pod: pinned, event: nodeUpdated,
			oldObj: capNode("n1", annotated("5"), inB), newObj: capNode("n1", annotated("5"), inA), want: fwk.Queue},
		{name: "a node without room relabeled into the nodeSelector", pod: pinned, event: nodeUpdated,
			oldObj: capNode("n1", annotated("1"), inB), newObj: capNode("n1", annotated("1"), inA), want: fwk.QueueSkip},
		{name: "a node relabeled out of the nodeSelector as its capacity grew", pod: pinned, event: nodeUpdated,
			oldObj: capNode("n1", annotated("1"), inA), newObj: capNode("n1", annotated("5"), inB), want: fwk.QueueSkip},
		{name: "a node added outside the nodeSelector", pod: pinned, event: nodeAdded, newObj: capNode("n2", annotated("5"), inB), want: fwk.QueueSkip},
		{name: "a node added inside the nodeSelector", pod: pinned, event: nodeAdded, newObj: capNode("n2", annotated("5"), inA), want: fwk.Queue},
		{name: "an affinity that does not parse: queued, never stuck", pod: broken, event: nodeUpdated,
			oldObj: capNode("n1", annotated("1"), inB), newObj: capNode("n1", annotated("5"), inB), want: fwk.Queue},
	})
}
