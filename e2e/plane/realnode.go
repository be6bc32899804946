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
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/nodeimage"
	"github.com/capscale/capscale/internal/names"
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
	// the bridge (Gateway) is the subnet's .1.
	Subnet                        netip.Prefix
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
// host-local's allocation files, one per address, named after it.
func (n *RealNode) AllocatedIPs() ([]netip.Addr, error) {
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

// CheckRealNodeHost says what this host lacks for real nodes, or nil.
func CheckRealNodeHost(binDir string) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the kubelet and containerd mount, create cgroups and network devices)")
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "nft", "go"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, p))
		}
	}
	if _, err := os.Stat(filepath.Join(binDir, "kubelet")); err != nil {
		missing = append(missing, filepath.Join(binDir, "kubelet")+" (make control-plane)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("real nodes need root and the packages of `make deps` (containerd, runc, containernetworking-plugins, iproute2, nftables); missing: %s", strings.Join(missing, ", "))
	}
	return nil
}

// startRealNodes starts Opts.RealNodes nodes and waits until all are Ready.
func (p *Plane) startRealNodes(ctx context.Context) error {
	o := p.Opts
	if err := CheckRealNodeHost(o.BinDir); err != nil {
		return err
	}
	capacity := o.RealNodeCapacity
	if capacity == 0 {
		capacity = DefaultRealNodeCapacity
	}
	base := filepath.Join(p.Dir, "real-nodes")
	images, err := nodeimage.Build(ctx, RepoRoot(), filepath.Join(base, "images"))
	if err != nil {
		return err
	}
	subnets, err := freeSubnets(o.RealNodes)
	if err != nil {
		return err
	}
	fp, err := newFootprint(p.Dir)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.footprint = fp
	p.mu.Unlock()
	for i := range o.RealNodes {
		n := &RealNode{
			Name:       RealNodeName(i),
			Dir:        filepath.Join(base, fmt.Sprint(i)),
			Capacity:   capacity,
			Subnet:     subnets[i],
			Bridge:     fmt.Sprintf("cs%sn%d", fp.RunID, i),
			Network:    fmt.Sprintf("capscale-%s-%d", fp.RunID, i),
			CgroupRoot: fmt.Sprintf("/capscale-%s-%d", fp.RunID, i),
			plane:      p,
		}
		n.ContainerdSocket = filepath.Join(n.Dir, "containerd.sock")
		if n.Gateway, n.RangeStart, n.RangeEnd, err = rangeOf(n.Subnet, capacity); err != nil {
			return err
		}
		// Before the node creates anything, record what it will own.
		fp.Nodes = append(fp.Nodes, nodeFootprint{Name: n.Name, Dir: n.Dir, CgroupRoot: n.CgroupRoot, Bridge: n.Bridge, Network: n.Network, PodLogsDir: n.PodLogsDir()})
		if err := fp.save(); err != nil {
			return err
		}
		if err := p.startRealNode(ctx, n, &fp.Nodes[i], images); err != nil {
			return fmt.Errorf("starting real node %s: %w", n.Name, err)
		}
		p.mu.Lock()
		p.RealNodes = append(p.RealNodes, n)
		p.mu.Unlock()
	}
	return p.waitRealNodesReady(ctx, p.RealNodes)
}

// startRealNode starts one node's containerd (with the images imported)
// and kubelet, with the credentials and RBAC the kubelet needs.
func (p *Plane) startRealNode(ctx context.Context, n *RealNode, fp *nodeFootprint, images []nodeimage.Image) error {
	start := time.Now()
	if len(n.ContainerdSocket)+len(".ttrpc") > 100 {
		return fmt.Errorf("containerd's socket path %s is too long for a unix socket: use a shorter plane directory", n.ContainerdSocket)
	}
	for _, d := range []string{"cni/net.d", "cni/ipam", "containerd", "kubelet", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	n.Port, n.HealthzPort = ports[0], ports[1]
	if err := fp.createCgroupRoot(); err != nil {
		return err
	}

	// containerd, then the images (no registry: imported from tarballs).
	files := map[string]func() ([]byte, error){
		"containerd.toml":                n.containerdConfig,
		"cni/net.d/10-capscale.conflist": n.cniConfig,
		"kubelet.yaml":                   func() ([]byte, error) { return n.kubeletConfig(p.PKI.ClusterCA.CertFile) },
	}
	for name, render := range files {
		b, err := render()
		if err != nil {
			return fmt.Errorf("rendering %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(n.Dir, name), b, 0o644); err != nil {
			return err
		}
	}
	ctrd, err := p.StartProcess("containerd-"+n.Name, "containerd", "--config", filepath.Join(n.Dir, "containerd.toml"))
	if err != nil {
		return err
	}
	err = p.waitUntil(ctx, ctrd, 30*time.Second, "containerd of "+n.Name, func(ctx context.Context) (bool, error) {
		_, err := n.Ctr(ctx, "version")
		return err == nil, nil
	})
	if err != nil {
		return err
	}
	for _, im := range images {
		if _, err := n.Ctr(ctx, "images", "import", im.Tarball); err != nil {
			return fmt.Errorf("importing %s: %w", im.Ref, err)
		}
	}

	// The kubelet's identity: system:node:<name> in group system:nodes,
	// signed by the plane's CA. The apiserver authorizes with RBAC only
	// (no Node authorizer), and since v1.8 the system:node ClusterRole is
	// bound to nobody by default: bind it to this node's user, or the
	// kubelet may not even register its Node.
	cert, err := p.PKI.ClusterCA.Issue(p.PKI.Dir, "kubelet-"+n.Name, CertSpec{
		CommonName: "system:node:" + n.Name, Organizations: []string{"system:nodes"}, Client: true,
	})
	if err != nil {
		return err
	}
	kc, err := p.writeCertKubeconfig("kubelet-"+n.Name, cert)
	if err != nil {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "capscale-e2e:node:" + n.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:node:" + n.Name}},
	}
	if _, err := p.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		return fmt.Errorf("binding system:node for %s: %w", n.Name, err)
	}
	n.kubeletArgs = []string{
		"--config=" + filepath.Join(n.Dir, "kubelet.yaml"),
		"--kubeconfig=" + kc,
		"--root-dir=" + filepath.Join(n.Dir, "kubelet"),
		// Not under --root-dir by default: /var/lib/kubelet/pki.
		"--cert-dir=" + filepath.Join(n.Dir, "kubelet", "pki"),
		// The flag wins over the configuration's volumePluginDir, and its
		// default, /usr/libexec/kubernetes/..., is created if missing.
		"--volume-plugin-dir=" + filepath.Join(n.Dir, "volume-plugins"),
		"--hostname-override=" + n.Name,
		fmt.Sprintf("--node-labels=%s=%d,%s=true", names.UnderlayIPCapacityLabel, n.Capacity, RealNodeLabel),
		"--v=1",
	}
	kubelet, err := p.StartProcess("kubelet-"+n.Name, p.bin("kubelet"), n.kubeletArgs...)
	if err != nil {
		return err
	}
	n.kubelet = kubelet
	n.Started = time.Since(start) // completed by waitRealNodesReady
	return nil
}

// waitRealNodesReady waits until every node is Ready and free of
// kube-controller-manager's not-ready taint, and adds the wait to each
// node's Started.
func (p *Plane) waitRealNodesReady(ctx context.Context, nodes []*RealNode) error {
	start := time.Now()
	pending := map[string]*RealNode{}
	for _, n := range nodes {
		pending[n.Name] = n
	}
	err := p.waitUntil(ctx, nil, 2*time.Minute, fmt.Sprintf("%d real nodes Ready", len(nodes)), func(ctx context.Context) (bool, error) {
		for name, n := range pending {
			if exited, err := n.Kubelet().Exited(); exited {
				return false, fmt.Errorf("the kubelet of %s exited: %v\n%s", name, err, n.Kubelet().Tail(20))
			}
			node, err := p.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !NodeReady(node) || NotReadyTainted(node) {
				continue
			}
			n.Started += time.Since(start)
			delete(pending, name)
		}
		return len(pending) == 0, nil
	})
	return err
}

// StopRealNodes removes the real nodes from the host (kubelets, containerd,
// containers, mounts, cgroups, bridges, files; the kernel settings they
// changed restored) and returns what went wrong, including anything of
// theirs still found on the host afterwards. Stop calls it too.
func (p *Plane) StopRealNodes() error {
	p.mu.Lock()
	fp := p.footprint
	p.footprint = nil
	p.mu.Unlock()
	if fp == nil {
		return nil
	}
	return fp.cleanup()
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
