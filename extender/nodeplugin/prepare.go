// Package nodeplugin is the node half of DRA mode's driver ip.capscale.io:
// a kubelet plugin, so that a kubelet without the alpha gate
// DRAOptionalNodeOperations runs pods whose claims hold underlay-IP
// devices. The kubelet calls a driver's plugin for every claim it
// prepares (k8s.io/kubernetes pkg/kubelet/cm/dra/manager.go,
// prepareResources: "DRA driver ... is not registered" otherwise). An IP
// needs nothing of the node beyond what the CNI does when the sandbox
// starts: preparing returns the claim's devices with no CDI device, and
// unpreparing does nothing. The device publisher (package devices) writes
// the ResourceSlices; this plugin publishes none and writes nothing to the
// API, it only reads the claims the kubelet names.
//
// Prepare is the decision, a plain function; Plugin adapts it to
// k8s.io/dynamic-resource-allocation/kubeletplugin, and Run serves it.
package nodeplugin

import (
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/capscale/capscale/internal/names"
)

// Driver is the driver whose claims the plugin prepares.
const Driver = names.UnderlayIPDriver

// Prepare is the answer to the kubelet's NodePrepareResources on node for
// claims: for each claim, its devices of Driver, each named by pool and
// device, with no CDI device (nothing is injected into the containers).
// A claim holding a device of Driver from another node's pool fails: the
// publisher writes one pool per node, named after it, so such a claim was
// allocated for another node, and its IP is not this node's to hand out.
// A claim with no device of Driver (the kubelet asks only about claims
// that have some) prepares to nothing.
func Prepare(node string, claims []*resourcev1.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		out[c.UID] = prepareOne(node, c)
	}
	return out
}

func prepareOne(node string, c *resourcev1.ResourceClaim) kubeletplugin.PrepareResult {
	if c.Status.Allocation == nil {
		// kubeletplugin checks this before calling; keep the rule whole.
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)}
	}
	devices := []kubeletplugin.Device{}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != Driver {
			continue
		}
		if r.Pool != node {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s holds underlay IP %s of node %s, not of this node %s", c.Namespace, c.Name, r.Device, r.Pool, node)}
		}
		devices = append(devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device})
	}
	return kubeletplugin.PrepareResult{Devices: devices}
}

// Unprepare is the answer to NodeUnprepareResources: nothing to undo, for
// every claim (the CNI takes the IP back when the sandbox stops).
func Unprepare(claims []kubeletplugin.NamespacedObject) map[types.UID]error {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out
}
