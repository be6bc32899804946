// Package devices is DRA mode's publisher: it keeps one ResourceSlice pool
// per node, driver ip.capscale.io, whose devices are the node's underlay
// IPs, one device per IP, so that kube-scheduler's DynamicResources plugin
// allocates a pod's capscale.io/underlay-ip request (through the
// DeviceClass underlay-ip.capscale.io and its extendedResourceName) from
// them and counts them itself (docs/design/dra-devices.md says why one
// device per IP).
//
// The budget of a node is what native mode would publish in its status
// (publisher.Decide: the capacity rule, less what its IPAM or its unasking
// pods take beyond the pods' requests; an invalid value gives the IPs in
// use). The devices published are the ones allocated now plus free ones up
// to the budget, and none while claims hold more than the budget: a shrink
// below what is allocated leaves nothing free, and nothing a claim gives
// back is free until the node is within its budget again.
//
// The decisions (Names, Slices, Changes) are plain functions; Publisher is
// the controller around them.
package devices

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/internal/names"
)

// Driver is the driver of every slice the publisher writes.
const Driver = names.UnderlayIPDriver

// devicePrefix starts every device's name: ip-0, ip-1, ...
const devicePrefix = "ip-"

// MaxPerSlice is how many devices one ResourceSlice may hold
// (resourcev1.ResourceSliceMaxDevices); a larger budget spans several
// slices of the node's pool.
const MaxPerSlice = resourcev1.ResourceSliceMaxDevices

// MaxDevices bounds what one node publishes (eight full slices): no node
// runs that many pods, and a budget beyond it (the rule allows up to
// underlay.MaxCapacity) must not make the publisher write thousands of
// slices.
const MaxDevices = 8 * MaxPerSlice

// DeviceName is the name of device i.
func DeviceName(i int) string { return devicePrefix + strconv.Itoa(i) }

// deviceIndex is the i of a device named DeviceName(i), -1 for another name.
func deviceIndex(name string) int {
	s, ok := strings.CutPrefix(name, devicePrefix)
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || DeviceName(i) != name {
		return -1
	}
	return i
}

// Names are the devices to publish on a node whose budget is budget and
// whose devices named allocated are held by claims: every allocated one,
// and the lowest-numbered others until there are budget devices (at most
// MaxDevices), in order of their number; none at all while more are
// allocated than the budget. Free is then budget less what is allocated,
// never below 0, whatever names earlier budgets gave out, and stays so
// when claims end before the next sync: a device freed then is free only
// while the node is within its budget. A name that is not DeviceName's (no
// writer of capscale's pool makes one) is left out.
func Names(budget int64, allocated []string) []string {
	held := make(map[int]bool, len(allocated))
	for _, a := range allocated {
		if i := deviceIndex(a); i >= 0 {
			held[i] = true
		}
	}
	if int64(len(held)) > budget {
		// Over the budget: publish no device at all. A device of a claim
		// that ends would be free at once, before this publisher could
		// take it away, and the node is still over (TestDRAMode's
		// capacity source subtest saw the waiting pod take it).
		return []string{}
	}
	free := max(min(budget, MaxDevices)-int64(len(held)), 0)
	out := make([]int, 0, len(held)+int(free))
	for i := range held {
		out = append(out, i)
	}
	for i := 0; free > 0; i++ {
		if !held[i] {
			out = append(out, i)
			free--
		}
	}
	slices.Sort(out)
	names := make([]string, len(out))
	for j, i := range out {
		names[j] = DeviceName(i)
	}
	return names
}

// SliceName is the name of the k-th slice of node's pool.
func SliceName(node string, k int) string {
	return node + "-" + strings.ReplaceAll(Driver, ".", "-") + "-" + strconv.Itoa(k)
}

// Slices are the ResourceSlices of node's pool at generation gen that hold
// devices, MaxPerSlice to a slice; a node with no device has one empty
// slice, so that its pool says so. Each is owned by the Node (uid), so that
// it goes with it. skipNodeOps says that the kubelet skips the driver's
// node operations (spec.skipNodeOperations "*", DRAOptionalNodeOperations,
// alpha in 1.37): set it only for a node that declares that feature, since
// kube-scheduler places no claim of such devices on any other node.
func Slices(node string, uid types.UID, gen int64, devices []string, skipNodeOps bool) []*resourcev1.ResourceSlice {
	n := max((len(devices)+MaxPerSlice-1)/MaxPerSlice, 1)
	out := make([]*resourcev1.ResourceSlice, 0, n)
	for k := range n {
		part := devices[min(k*MaxPerSlice, len(devices)):min((k+1)*MaxPerSlice, len(devices))]
		ds := make([]resourcev1.Device, len(part))
		for j, d := range part {
			ds[j] = resourcev1.Device{Name: d}
		}
		out = append(out, &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: SliceName(node, k),
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node, UID: uid, Controller: ptr.To(true),
				}},
			},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:   Driver,
				NodeName: ptr.To(node),
				Pool:     resourcev1.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: int64(n)},
				Devices:  ds,
			},
		})
		if skipNodeOps {
			// An IP needs nothing of the kubelet: no plugin call.
			out[k].Spec.SkipNodeOperations = []resourcev1.SkipNodeOperation{resourcev1.SkipNodeOperationAll}
		}
	}
	return out
}

// Change is one write of a node's pool.
type Change struct {
	// Create, Update or Delete this slice (Update carries the current
	// resourceVersion).
	Create, Update, Delete *resourcev1.ResourceSlice
}

// Changes are the writes that make node's pool, whose slices are now have
// (capscale's, of any generation), publish devices: none when it does
// already. The pool's generation then grows by one, on every slice, so
// that no allocator ever mixes an old slice with a new one (it uses only
// the slices of a pool's highest generation, and a pool whose count of
// slices is not all there is incomplete: nothing is allocated from it).
func Changes(node string, uid types.UID, have []*resourcev1.ResourceSlice, devices []string, skipNodeOps bool) []Change {
	var gen int64
	for _, s := range have {
		gen = max(gen, s.Spec.Pool.Generation)
	}
	want := Slices(node, uid, gen, devices, skipNodeOps)
	if same(have, want) {
		return nil
	}
	want = Slices(node, uid, gen+1, devices, skipNodeOps)
	byName := make(map[string]*resourcev1.ResourceSlice, len(have))
	for _, s := range have {
		byName[s.Name] = s
	}
	var out []Change
	for _, w := range want {
		if h, ok := byName[w.Name]; ok {
			w.ResourceVersion = h.ResourceVersion
			out = append(out, Change{Update: w})
			delete(byName, w.Name)
			continue
		}
		out = append(out, Change{Create: w})
	}
	rest := make([]*resourcev1.ResourceSlice, 0, len(byName))
	for _, h := range byName {
		rest = append(rest, h)
	}
	slices.SortFunc(rest, func(a, b *resourcev1.ResourceSlice) int { return cmp.Compare(a.Name, b.Name) })
	for _, h := range rest {
		out = append(out, Change{Delete: h})
	}
	return out
}

// same reports whether have is want: the same slices by name, each at
// want's generation with want's spec and owner.
func same(have, want []*resourcev1.ResourceSlice) bool {
	if len(have) != len(want) {
		return false
	}
	byName := make(map[string]*resourcev1.ResourceSlice, len(have))
	for _, h := range have {
		byName[h.Name] = h
	}
	for _, w := range want {
		h, ok := byName[w.Name]
		if !ok || !equality.Semantic.DeepEqual(h.Spec, w.Spec) ||
			!equality.Semantic.DeepEqual(h.OwnerReferences, w.OwnerReferences) {
			return false
		}
	}
	return true
}

// Allocated lists, by node (its pool), the devices of Driver that claim
// holds.
func Allocated(claim *resourcev1.ResourceClaim) map[string][]string {
	if claim == nil || claim.Status.Allocation == nil {
		return nil
	}
	var out map[string][]string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != Driver {
			continue
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[r.Pool] = append(out[r.Pool], r.Device)
	}
	return out
}
