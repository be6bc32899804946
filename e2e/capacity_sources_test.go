//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
	"github.com/capscale/capscale/e2e/ipamcrd"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// Capacity sources (issue 43): capscale-controller mirrors each node's
// capacity from the cluster's IPAM objects onto the Node, and every mode
// follows it through the one rule. Each source runs the same scenario in
// each mode, on its project's own CRD (package ipamcrd: the YAML out of the
// project's Go module) with objects shaped as its controllers write them
// (package ipamtest).

// ipamSource is one capacity source under test.
type ipamSource struct {
	name string
	// source is its entry of the --capacity-sources file, less the
	// nodeSelector: it covers its own two nodes (sourcesFile), so a node
	// of them without an object is invalid, never the default.
	source map[string]any
	// resource names it in the invalid reason: resource.group.
	resource string
	gvr      schema.GroupVersionResource
	// crd installs the CRD.
	crd func(ctx context.Context, s *stack.Stack) error
	// object is the node's object giving capacity; malformed one the CRD
	// accepts and the expression refuses.
	object, malformed func(node string, uid types.UID, capacity int) *unstructured.Unstructured
	// reason is what the malformed object's invalid value says.
	reason string
}

// upstreamCRD installs an IPAM's own CRD, read out of its Go module.
func upstreamCRD(c ipamcrd.CRD) func(ctx context.Context, s *stack.Stack) error {
	return func(ctx context.Context, s *stack.Stack) error {
		file, err := c.File(ctx)
		if err != nil {
			return err
		}
		if _, err := s.Kubectl(ctx, "apply", "--server-side", "-f", file); err != nil {
			return err
		}
		s.Opts.Plane.Logf("installed CRD %s from %s@%s %s", c.Name, c.Module, c.Version, c.Path)
		return waitCRD(ctx, s, c.Name)
	}
}

// waitCRD waits until the CRD name is Established.
func waitCRD(ctx context.Context, s *stack.Stack, name string) error {
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		return err
	}
	crds := dyn.Resource(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// ownIPAMCRD is an IPAM of a user's own: one NodeIPPool per node naming it
// in spec.nodeName, its free addresses counted in status.allocatable (an
// int or, for the malformed case, a string the schema allows).
const ownIPAMCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: nodeippools.ipam.example.com}
spec:
  group: ipam.example.com
  scope: Cluster
  names: {kind: NodeIPPool, listKind: NodeIPPoolList, plural: nodeippools, singular: nodeippool}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              nodeName: {type: string}
              subnet: {type: string}
          status:
            type: object
            properties:
              allocatable: {x-kubernetes-int-or-string: true}
`

var capacitySources = []ipamSource{
	{
		name: "cilium-eni", resource: "ciliumnodes.cilium.io", gvr: schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"},
		source: map[string]any{"name": "cilium-eni", "preset": "cilium-eni"},
		crd:    upstreamCRD(ipamcrd.CiliumNode),
		// The agent's router and health IPs come out of the pool.
		object: func(node string, uid types.UID, c int) *unstructured.Unstructured {
			return ipamtest.CiliumNodeENI(node, uid, c+2, nil)
		},
		// More IPs in use by the agent than the pool holds: negative.
		malformed: func(node string, uid types.UID, _ int) *unstructured.Unstructured {
			u := ipamtest.CiliumNodeENI(node, uid, 3, nil)
			spool := u.Object["spec"].(map[string]any)["ipam"].(map[string]any)["pool"].(map[string]any)
			for k := range spool {
				if k != "10.0.1.4" {
					delete(spool, k)
				}
			}
			return u
		},
		reason: "negative: -1",
	},
	{
		name: "cilium-azure", resource: "ciliumnodes.cilium.io", gvr: schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"},
		source: map[string]any{"name": "cilium-azure", "preset": "cilium-azure"},
		crd:    upstreamCRD(ipamcrd.CiliumNode),
		object: func(node string, uid types.UID, c int) *unstructured.Unstructured {
			return ipamtest.CiliumNodeAzure(node, uid, c+2, nil)
		},
		malformed: func(node string, uid types.UID, _ int) *unstructured.Unstructured {
			u := ipamtest.CiliumNodeAzure(node, uid, 3, nil)
			u.Object["spec"].(map[string]any)["ipam"].(map[string]any)["pool"] = map[string]any{}
			return u
		},
		reason: "negative: -2",
	},
	{
		name: "cilium-multi-pool", resource: "ciliumnodes.cilium.io", gvr: schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"},
		source: map[string]any{"name": "cilium-multi-pool", "preset": "cilium-multi-pool"},
		crd:    upstreamCRD(ipamcrd.CiliumNode),
		// c addresses as delegated prefixes (every address usable):
		// /32s and a /31 per pair.
		object: func(node string, uid types.UID, c int) *unstructured.Unstructured {
			var cidrs []string
			for i := 0; i < c; i += 2 {
				if c-i >= 2 {
					cidrs = append(cidrs, fmt.Sprintf("10.20.%d.%d/31", i/250, i%250))
				} else {
					cidrs = append(cidrs, fmt.Sprintf("10.20.%d.%d/32", i/250, i%250))
				}
			}
			// The preset counts the default pool only (issue 55 §5), less
			// the agent's router and health IPs, here a /31 of their own.
			cidrs = append(cidrs, "10.21.0.0/31")
			return ipamtest.CiliumNodeMultiPool(node, uid, []ipamtest.PoolAllocation{{Pool: "default", CIDRs: cidrs, AllowFirstIP: true, AllowLastIP: true}},
				"10.21.0.0", "10.21.0.1")
		},
		// A CIDR of more addresses than any node holds.
		malformed: func(node string, uid types.UID, _ int) *unstructured.Unstructured {
			return ipamtest.CiliumNodeMultiPool(node, uid, []ipamtest.PoolAllocation{{Pool: "default", CIDRs: []string{"10.0.0.0/8"}}})
		},
		reason: "larger than 1048576",
	},
	{
		name: "azure-cns", resource: "nodenetworkconfigs.acn.azure.com", gvr: schema.GroupVersionResource{Group: "acn.azure.com", Version: "v1alpha", Resource: "nodenetworkconfigs"},
		source: map[string]any{"name": "azure-cns", "preset": "azure-cns"},
		crd:    upstreamCRD(ipamcrd.NodeNetworkConfig),
		// As CNS v2 leaves it after a scale-down: three names in
		// ipsNotInUse already gone from the assignments, which must not
		// lower the count (issue 49). No malformed object: the preset
		// counts assignments not listed, total over every object ACN
		// v1.8.11's CRD accepts (stale names were the old "malformed" case).
		object: func(node string, uid types.UID, c int) *unstructured.Unstructured {
			return ipamtest.NodeNetworkConfig(node, uid, c, c, 0, 3)
		},
	},
	{
		name: "own-ipam", resource: "nodeippools.ipam.example.com", gvr: schema.GroupVersionResource{Group: "ipam.example.com", Version: "v1", Resource: "nodeippools"},
		source: map[string]any{"name": "own-ipam",
			"resource": map[string]any{"group": "ipam.example.com", "version": "v1", "resource": "nodeippools"},
			"node":     "object.spec.nodeName", "capacity": "object.status.allocatable", "draws": "marked"},
		crd: func(ctx context.Context, s *stack.Stack) error {
			f := filepath.Join(s.Dir, "nodeippools.yaml")
			if err := os.WriteFile(f, []byte(ownIPAMCRD), 0o600); err != nil {
				return err
			}
			if _, err := s.Kubectl(ctx, "apply", "-f", f); err != nil {
				return err
			}
			return waitCRD(ctx, s, "nodeippools.ipam.example.com")
		},
		object: func(node string, _ types.UID, c int) *unstructured.Unstructured {
			return ownPool(node, int64(c))
		},
		malformed: func(node string, _ types.UID, _ int) *unstructured.Unstructured { return ownPool(node, "ten") },
		reason:    `gives string "ten", want an int`,
	},
}

func ownPool(node string, allocatable any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipam.example.com/v1", "kind": "NodeIPPool",
		"metadata": map[string]any{"name": "pool-" + node},
		"spec":     map[string]any{"nodeName": node, "subnet": "192.168.0.0/24"},
		"status":   map[string]any{"allocatable": allocatable},
	}}
}

// putObject creates or replaces obj, spec then status.
func putObject(ctx context.Context, t *testing.T, s *stack.Stack, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := ipamcrd.Put(ctx, dyn, gvr, obj); err != nil {
		t.Fatal(err)
	}
}

func deleteObject(ctx context.Context, t *testing.T, s *stack.Stack, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(gvr).Namespace(obj.GetNamespace()).Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitMirrored waits until node's mirrored value satisfies ok and, in
// native mode, until its published capacity is published (want, or, for
// an invalid value, inUse).
func waitMirrored(ctx context.Context, t *testing.T, s *stack.Stack, node string, ok func(v string) bool, published int64) {
	t.Helper()
	waitNodeAnnotation(ctx, t, s, node, names.UnderlayIPSourceCapacityAnnotation, ok, published)
}

// waitNodeAnnotation waits until node's annotation key satisfies ok and, in
// native mode, until its allocatable is published.
func waitNodeAnnotation(ctx context.Context, t *testing.T, s *stack.Stack, node, key string, ok func(v string) bool, published int64) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		v := n.Annotations[key]
		last = fmt.Sprintf("%s %q, capacity %q, origin %q", key, v, n.Annotations[names.UnderlayIPSourceCapacityAnnotation], n.Annotations[names.UnderlayIPSourceAnnotation])
		if !ok(v) {
			return false, nil
		}
		if s.Opts.Native {
			a := n.Status.Allocatable[names.UnderlayIPResource]
			last += fmt.Sprintf(", allocatable %s want %d", a.String(), published)
			return a.Value() == published, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("node %s: %s: %v", node, last, err)
	}
}

func is(n int) func(string) bool { return func(v string) bool { return v == strconv.Itoa(n) } }

// sourceLabel puts each source's two nodes apart: the source selects them,
// and the scenario's pods ask for them.
const sourceLabel = "capscale.test/source"

// sourcesFile is the --capacity-sources file of every source, each covering
// the two nodes labelled with its name.
func sourcesFile(t *testing.T) string {
	t.Helper()
	var list []map[string]any
	for _, src := range capacitySources {
		e := map[string]any{"nodeSelector": map[string]any{"matchLabels": map[string]any{sourceLabel: src.name}}}
		for k, v := range src.source {
			e[k] = v
		}
		list = append(list, e)
	}
	b, err := yaml.Marshal(map[string]any{"sources": list})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCapacitySources: for each mode, every source at once on one plane,
// each on its own two nodes, whose objects say 3 and 2 IPs:
//   - a burst of 8 underlay pods binds exactly 5, never a node over;
//   - node 0's object raised to 5 while 3 pods wait: 2 bound within 5 s;
//   - lowered to 1 under 5 running pods: none evicted, and with one of them
//     deleted the waiting pod still does not fit;
//   - its object deleted: invalid (annotation "invalid: no ... object"),
//     nothing new fits, native mode publishes what is in use;
//   - a malformed object (the CRD accepts it, the expression refuses it):
//     invalid with the expression's reason, for each source that has one;
//   - the object fixed (6): the waiting pod bound within 5 s.
//
// One plane per mode rather than per source and mode: starting a plane
// was most of each scenario's time (issue 52's CI budget).
func TestCapacitySources(t *testing.T) {
	forEachMode(t, func(t *testing.T, m schedulingMode) {
		o := m.stack(plane.Options{Nodes: 2 * len(capacitySources), Logf: t.Logf, Node: func(i int, n *corev1.Node) {
			n.Labels[sourceLabel] = capacitySources[i/2].name
		}})
		o.CapacitySources = sourcesFile(t)
		o.Prepare = func(ctx context.Context, s *stack.Stack) error {
			for _, src := range capacitySources {
				if err := src.crd(ctx, s); err != nil {
					return err
				}
			}
			return nil
		}
		s := startStack(t, o)
		for i, src := range capacitySources {
			t.Run(src.name, func(t *testing.T) {
				t.Parallel()
				capacitySourceScenario(t, s, m, src, plane.NodeName(2*i), plane.NodeName(2*i+1))
			})
		}
	})
}

func capacitySourceScenario(t *testing.T, s *stack.Stack, m schedulingMode, src ipamSource, n0, n1 string) {
	ctx := testContext(t, 5*time.Minute)
	uid := map[string]types.UID{}
	for _, n := range []string{n0, n1} {
		node, err := s.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uid[n] = node.UID
	}
	// Covered, no object yet: invalid, not the default of 10.
	waitMirrored(ctx, t, s, n0, func(v string) bool {
		return strings.HasPrefix(v, "invalid: no "+src.resource+" object maps to this node")
	}, 0)

	putObject(ctx, t, s, src.gvr, src.object(n0, uid[n0], 3))
	putObject(ctx, t, s, src.gvr, src.object(n1, uid[n1], 2))
	waitMirrored(ctx, t, s, n0, is(3), 3)
	waitMirrored(ctx, t, s, n1, is(2), 2)

	ns := "ipam-" + src.name
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	var burst []*corev1.Pod
	for i := range 8 {
		p := underlayPod(ns, fmt.Sprintf("p-%d", i), "p")
		p.Spec.NodeSelector = map[string]string{sourceLabel: src.name}
		burst = append(burst, p)
	}
	createPods(ctx, t, s, burst...)
	capacity := map[string]int{n0: 3, n1: 2}
	waitUnderlay(ctx, t, s, ns, capacity, 5, 3)
	assertNeverOver(ctx, t, s, ns, capacity, 2*time.Second)
	waitRejected(ctx, t, s, ns, pendingPod(ctx, t, s, ns))

	// Raised while pods wait.
	start := time.Now()
	putObject(ctx, t, s, src.gvr, src.object(n0, uid[n0], 5))
	capacity[n0] = 5
	waitBoundWithin(ctx, t, s, ns, capacity, 7, 5*time.Second)
	t.Logf("%s, %s mode: raised capacity to 2 waiting pods bound in %s", src.name, m.name, time.Since(start).Round(time.Millisecond))

	// Lowered under running pods: none evicted, nothing new fits.
	putObject(ctx, t, s, src.gvr, src.object(n0, uid[n0], 1))
	waitMirrored(ctx, t, s, n0, is(1), 1)
	held := podsOn(ctx, t, s, ns, n0)
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, held[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stayBoundPending(ctx, t, s, ns, 6, 1, 3*time.Second)

	// Deleted: invalid; native mode publishes the 4 IPs in use.
	deleteObject(ctx, t, s, src.gvr, src.object(n0, uid[n0], 0))
	waitMirrored(ctx, t, s, n0, func(v string) bool { return strings.HasPrefix(v, "invalid: no "+src.resource) }, 4)
	stayBoundPending(ctx, t, s, ns, 6, 1, 2*time.Second)

	// Malformed: invalid with the expression's reason (a preset whose
	// expression is total over what its CRD accepts has no such object).
	if src.malformed != nil {
		putObject(ctx, t, s, src.gvr, src.malformed(n0, uid[n0], 0))
		waitMirrored(ctx, t, s, n0, func(v string) bool {
			return strings.HasPrefix(v, "invalid: capacity expression: ") && strings.Contains(v, src.reason)
		}, 4)
		stayBoundPending(ctx, t, s, ns, 6, 1, 2*time.Second)
	}

	// Fixed: 6 IPs, 4 in use; the waiting pod binds.
	start = time.Now()
	putObject(ctx, t, s, src.gvr, src.object(n0, uid[n0], 6))
	capacity[n0] = 6
	waitBoundWithin(ctx, t, s, ns, capacity, 7, 5*time.Second)
	t.Logf("%s, %s mode: fixed object to the waiting pod bound in %s", src.name, m.name, time.Since(start).Round(time.Millisecond))
}

// podsOn lists the bound pods of ns on node.
func podsOn(ctx context.Context, t *testing.T, s *stack.Stack, ns, node string) []string {
	t.Helper()
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no pod of %s on %s", ns, node)
	}
	return out
}

// stayBoundPending checks for d that exactly bound pods of ns are bound and
// pending wait: nothing evicted, nothing placed where it does not fit.
func stayBoundPending(ctx context.Context, t *testing.T, s *stack.Stack, ns string, bound, pending int, d time.Duration) {
	t.Helper()
	// The deleted pod may take a moment to go.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, b, p, err := underlayUsage(ctx, s, ns)
		return err == nil && b == bound && p == pending, nil
	}); err != nil {
		_, b, p, _ := underlayUsage(ctx, s, ns)
		t.Fatalf("want %d bound and %d pending, have %d and %d", bound, pending, b, p)
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if _, b, p, err := underlayUsage(ctx, s, ns); err != nil {
			t.Fatal(err)
		} else if b != bound || p != pending {
			t.Fatalf("%d bound and %d pending, want %d and %d: a pod was evicted or placed where no IP is free", b, p, bound, pending)
		}
	}
}
