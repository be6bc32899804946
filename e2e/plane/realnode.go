package plane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/nodeimage"
)

// Real nodes: beside the kwok nodes, a plane can run nodes whose kubelet
// (v1.37.2, built like the control plane) starts real containers through a
// containerd of their own, on a pod network whose IPAM (CNI bridge +
// host-local) holds exactly the node's capacity of addresses. They show
// what kwok cannot: a pod that the IPAM has no address for waits in
// ContainerCreating. They need root and the packages of `make deps`.

// RealNodeImage is an image present on every real node (imported, never
// pulled: pods set imagePullPolicy: Never): an HTTP server on :8080 that
// answers with its pod's name and records SIGTERM (e2e/nodeimage/web).
const RealNodeImage = nodeimage.Web

// RealNodeLabel is set to "true" on real nodes, for a nodeSelector.
const RealNodeLabel = "e2e.capscale.io/real-node"

// DefaultRealNodeCapacity is a real node's pool of pod IPs by default.
const DefaultRealNodeCapacity = 10

// cniBinDir is where Debian's containernetworking-plugins installs them.
const cniBinDir = "/usr/lib/cni"

// RealNodeName is the name of the i-th real node.
func RealNodeName(i int) string { return fmt.Sprintf("real-node-%d", i) }

// RealNode is a running real node.
type RealNode struct {
	Name string
	// Dir is the node's own directory: containerd's root and state, the
	// kubelet's root, the CNI configuration and IPAM data, pod logs.
	Dir string
	// Capacity is the size of the node's IP pool, and its
	// capscale.io/underlay-ip-capacity label.
	Capacity int
	// Subnet is the node's pod network; the pool is RangeStart..RangeEnd,
	// the bridge (Gateway) is the subnet's .1. With IPAM whereabouts,
	// Subnet is the network's range, shared by the nodes, Slice the
	// node's slice of it (RangeStart..RangeEnd: all but its network and
	// broadcast), and the bridge an address of the range's last slice.
	Subnet, Slice                 netip.Prefix
	Gateway, RangeStart, RangeEnd netip.Addr
	// Bridge, Network and CgroupRoot are the node's own on the host: the
	// CNI bridge, the CNI network name, the kubelet's cgroupRoot.
	Bridge, Network, CgroupRoot string
	// ContainerdSocket is the node's containerd (ctr --address).
	ContainerdSocket string
	// Port and HealthzPort are the kubelet's, on 127.0.0.1.
	Port, HealthzPort int
	// Started is how long the node took from containerd's start to Ready
	// and schedulable.
	Started time.Duration

	// services: the plane's service network reaches this node's pods
	// (realnode_services.go).
	services    bool
	plane       *Plane
	kubeletArgs []string
	mu          sync.Mutex
	kubelet     *Process
}

// PodLogsDir is where the kubelet writes the node's container logs
// (<namespace>_<pod>_<uid>/<container>/<restart>.log).
func (n *RealNode) PodLogsDir() string { return filepath.Join(n.Dir, "pod-logs") }

// ipamDataDir is host-local's dataDir; it keeps the allocations of the
// network in the subdirectory named after it.
func (n *RealNode) ipamDataDir() string { return filepath.Join(n.Dir, "cni", "ipam") }

// AllocatedIPs returns the addresses the IPAM has handed out on this node:
// host-local's allocation files, one per address, named after it, or
// whereabouts' IPPool of the node.
func (n *RealNode) AllocatedIPs() ([]netip.Addr, error) {
	if wb := n.whereabouts(); wb != nil {
		return wb.allocatedIPs(n)
	}
	entries, err := os.ReadDir(filepath.Join(n.ipamDataDir(), n.Network))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	for _, e := range entries {
		if a, err := netip.ParseAddr(e.Name()); err == nil {
			ips = append(ips, a)
		}
	}
	return ips, nil
}

// InRange reports whether ip is in the node's pool.
func (n *RealNode) InRange(ip netip.Addr) bool {
	return ip.Is4() && n.RangeStart.Compare(ip) <= 0 && ip.Compare(n.RangeEnd) <= 0
}

// Ctr runs ctr against the node's containerd, in the CRI's namespace.
func (n *RealNode) Ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.ContainerdSocket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %v on %s: %w: %s", args, n.Name, err, out)
	}
	return string(out), nil
}

// Kubelet is the node's current kubelet process.
func (n *RealNode) Kubelet() *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kubelet
}

// StopKubelet stops the kubelet (SIGTERM, then SIGKILL); its containers
// keep running, as they do when a kubelet restarts.
func (n *RealNode) StopKubelet() { n.Kubelet().Stop(5 * time.Second) }

// StartKubelet starts the kubelet again with the same configuration and
// waits until it has registered the Node (anew, or found it registered)
// and the Node is Ready.
func (n *RealNode) StartKubelet(ctx context.Context) error {
	registered := n.KubeletLogCount(registeredLines...)
	proc, err := n.plane.StartProcess("kubelet-"+n.Name, n.plane.bin("kubelet"), n.kubeletArgs...)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.kubelet = proc
	n.mu.Unlock()
	err = n.plane.waitUntil(ctx, proc, time.Minute, "the kubelet of "+n.Name+" to register", func(context.Context) (bool, error) {
		return n.KubeletLogCount(registeredLines...) > registered, nil
	})
	if err != nil {
		return err
	}
	return n.plane.waitRealNodesReady(ctx, []*RealNode{n})
}

// registeredLines are what the kubelet logs once it has registered its
// Node, or found it registered (pkg/kubelet/kubelet_node_status.go).
var registeredLines = []string{"Successfully registered node", "Node was previously registered"}

// KubeletLogCount counts the lines of the kubelet's log (every run of it)
// that contain one of substrs.
func (n *RealNode) KubeletLogCount(substrs ...string) int {
	b, err := os.ReadFile(n.Kubelet().LogFile)
	if err != nil {
		return 0
	}
	count := 0
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range substrs {
			if strings.Contains(l, s) {
				count++
				break
			}
		}
	}
	return count
}

// RestartKubelet is StopKubelet then StartKubelet.
func (n *RealNode) RestartKubelet(ctx context.Context) error {
	n.StopKubelet()
	return n.StartKubelet(ctx)
}

// ForgetDevicePluginState empties the kubelets' device-plugin directory of
// what the run put there (the registration socket, the checkpoint), as on
// a re-created machine: a kubelet that then finds its Node registered
// takes it for re-created and zeroes its extended resources — it looks for
// any file there (ShouldResetExtendedResourceCapacity), the socket
// included. Stop the kubelets first. What was there before the run stays.
func (p *Plane) ForgetDevicePluginState() error {
	p.mu.Lock()
	fp := p.footprint
	p.mu.Unlock()
	if fp == nil {
		return errors.New("no real nodes")
	}
	entries, err := os.ReadDir(devicePluginDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !slices.Contains(fp.DevicePluginEntries, e.Name()) {
			errs = append(errs, removeIfExists(filepath.Join(devicePluginDir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// RealNodeFootprint is the file recording what the plane's real nodes
// created on the host (`make local-down` cleans up from it), or "".
func (p *Plane) RealNodeFootprint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.footprint == nil {
		return ""
	}
	return p.footprint.path
}

// CleanRealNodeFootprint cleans up the run recorded in the footprint file
// path (written by a plane with real nodes, maybe in another process).
func CleanRealNodeFootprint(path string) error {
	f, err := loadFootprint(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.cleanup()
}

// Pods on real nodes: helpers for tests.

// RealNodePod returns a pod for a real node: RealNodeImage, never pulled,
// no service-account token (nothing in it calls the apiserver), on the
// real nodes only. Callers set the node, resources and schedulerName.
func RealNodePod(ns, name string) *corev1.Pod {
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{RealNodeLabel: "true"},
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Containers: []corev1.Container{{
				Name: "web", Image: RealNodeImage, ImagePullPolicy: corev1.PullNever,
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			}},
		},
	}
}
