package plane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
)

// whereaboutsSlicesRange is the range StartWhereaboutsSlices divides: no
// pod takes an address of it on kwok nodes, so a documentation range
// (TEST-NET-2) that no host routes will do.
var whereaboutsSlicesRange = netip.MustParsePrefix("198.51.100.0/24")

// StartWhereaboutsSlices runs whereabouts' node-slice controller (with its
// CRDs, its identity and a network whose slices hold capacity usable IPs)
// on a plane without real nodes: the controller needs only the API, and
// gives every Node a slice as it joins, the ones a node autoscaler
// launches too. It returns the network's NodeSlicePool, in
// WhereaboutsNamespace, once the controller has made it, and the
// controller's process. A plane with IPAM whereabouts has its own network;
// this is for kwok nodes alone.
func (p *Plane) StartWhereaboutsSlices(ctx context.Context, capacity int) (string, *Process, error) {
	if p.wb != nil || p.Opts.RealNodes > 0 {
		return "", nil, errors.New("StartWhereaboutsSlices is for a plane of kwok nodes alone (real nodes use Options.IPAM)")
	}
	bits, err := whereaboutsSliceBits(capacity)
	if err != nil {
		return "", nil, err
	}
	wb, err := p.setupWhereabouts(ctx, "capscale-slices", whereaboutsSlicesRange, bits)
	if err != nil {
		return "", nil, err
	}
	p.wb = wb
	return wb.Name, wb.controller, nil
}

// WhereaboutsCNI runs whereabouts' own CNI plugin (v0.9.2, the binary
// real nodes run) for a pod's sandbox on node, as the node's kubelet would
// through its CNI: "ADD" hands the pod an address of the node's slice and
// records it in the node's IPPool (made at the node's first ADD), "DEL"
// gives it back (cmd/whereabouts.go cmdAdd, cmdDel;
// pkg/storage/kubernetes/ipam.go IPManagement). On kwok nodes nothing else
// calls it, so a test decides when an IP is handed out and when it is
// back. It is for a plane StartWhereaboutsSlices set up.
func (p *Plane) WhereaboutsCNI(ctx context.Context, command, node, namespace, pod, containerID string) (string, error) {
	if p.wb == nil {
		return "", errors.New("WhereaboutsCNI needs whereabouts' network: StartWhereaboutsSlices first")
	}
	conf, err := json.Marshal(map[string]any{"cniVersion": "0.4.0", "name": p.wb.Name, "type": "bridge", "ipam": p.wb.ipam(netip.Addr{}, "", false)})
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, p.bin("whereabouts"))
	cmd.Stdin = bytes.NewReader(conf)
	// The plugin reads its node from NODENAME (ipam.go getNodeName) and
	// never enters the sandbox's network namespace, which CNI requires be
	// named on ADD.
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+containerID, "CNI_NETNS=/var/run/netns/"+containerID,
		"CNI_IFNAME=eth0", "CNI_PATH="+p.Opts.BinDir, "NODENAME="+node,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE="+namespace+";K8S_POD_NAME="+pod+";K8S_POD_INFRA_CONTAINER_ID="+containerID)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("whereabouts CNI %s for %s/%s on %s: %w: %s", command, namespace, pod, node, err, out)
	}
	return string(out), nil
}
