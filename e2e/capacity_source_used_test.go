//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// usedIPAMCRD is ownIPAMCRD with the IPs in use reported too
// (status.inUse), as an IPAM that lists its allocations does.
var usedIPAMCRD = strings.Replace(ownIPAMCRD, "allocatable: {x-kubernetes-int-or-string: true}",
	"allocatable: {x-kubernetes-int-or-string: true}\n              inUse: {type: integer}", 1)

const usedSourceFile = `sources:
- name: own-ipam
  resource: {group: ipam.example.com, version: v1, resource: nodeippools}
  node: object.spec.nodeName
  capacity: object.status.allocatable
  draws: marked
  used: object.status.inUse
  nodeSelector: {matchLabels: {type: kwok}}`

var poolsGVR = schema.GroupVersionResource{Group: "ipam.example.com", Version: "v1", Resource: "nodeippools"}

// usedPool is node's pool of capacity IPs, inUse of them in use.
func usedPool(node string, capacity, inUse int64) *unstructured.Unstructured {
	u := ownPool(node, capacity)
	u.Object["status"].(map[string]any)["inUse"] = inUse
	return u
}

// TestCapacitySourceUsed: in each mode, a node whose IPAM reports more
// IPs in use than its pods hold (the sandbox of a pod that left the API,
// not yet torn down) takes no pod into them; when the IPAM reports the IP
// back, the waiting pod is bound within 5 s (queueing hint, the
// extender's requeuer, the publisher's republish).
func TestCapacitySourceUsed(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		o := m.stack(plane.Options{Nodes: 1, Logf: t.Logf})
		o.CapacitySources = usedSourceFile
		o.Prepare = func(ctx context.Context, s *stack.Stack) error {
			f := filepath.Join(s.Dir, "nodeippools.yaml")
			if err := os.WriteFile(f, []byte(usedIPAMCRD), 0o600); err != nil {
				return err
			}
			if _, err := s.Kubectl(ctx, "apply", "-f", f); err != nil {
				return err
			}
			return waitCRD(ctx, s, "nodeippools.ipam.example.com")
		}
		s := startStack(t, o)
		ctx := testContext(t, 4*time.Minute)
		n0 := plane.NodeName(0)
		putObject(ctx, t, s, poolsGVR, usedPool(n0, 3, 0))
		waitUsed(ctx, t, s, n0, "0", 3)

		const ns = "ipam-used"
		if err := s.WaitForNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		createPods(ctx, t, s, underlayPod(ns, "p-0", "p"), underlayPod(ns, "p-1", "p"))
		capacity := map[string]int{n0: 3}
		waitBoundWithin(ctx, t, s, ns, capacity, 2, 30*time.Second)

		// The IPAM holds 3: two pods' and one a deleted pod's sandbox
		// still has. Native mode publishes 3 less the one the pods do not
		// account for.
		putObject(ctx, t, s, poolsGVR, usedPool(n0, 3, 3))
		waitUsed(ctx, t, s, n0, "3", 2)
		schedulerSaw(ctx, t, s, n0)
		createPods(ctx, t, s, underlayPod(ns, "p-2", "p"))
		waitRejected(ctx, t, s, ns, "p-2")
		stayBoundPending(ctx, t, s, ns, 2, 1, 3*time.Second)

		// The IPAM has it back: the waiting pod is bound.
		start := time.Now()
		putObject(ctx, t, s, poolsGVR, usedPool(n0, 3, 2))
		waitBoundWithin(ctx, t, s, ns, capacity, 3, 5*time.Second)
		t.Logf("%s mode: the IPAM's report lowered to the waiting pod bound in %s (from the object's write)", m.name, time.Since(start).Round(time.Millisecond))
	})
}

// waitUsed waits until node carries the IPAM's used figure used and, in
// native mode, publishes allocatable.
func waitUsed(ctx context.Context, t *testing.T, s *stack.Stack, node, used string, allocatable int64) {
	t.Helper()
	waitNodeAnnotation(ctx, t, s, node, names.UnderlayIPSourceUsedAnnotation, func(v string) bool { return v == used }, allocatable)
}
