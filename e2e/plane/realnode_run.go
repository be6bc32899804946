package plane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/e2e/nodeimage"
	"github.com/capscale/capscale/internal/names"
)

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

// checkRealNodeOptions refuses real-node options that cannot all hold,
// before Start starts anything: none of them is ever silently dropped.
func checkRealNodeOptions(o Options) error {
	switch {
	case o.RealNodes < 0:
		return fmt.Errorf("RealNodes must be at least 0, got %d", o.RealNodes)
	case len(o.RealNodeCapacities) > 0 && len(o.RealNodeCapacities) != o.RealNodes:
		return fmt.Errorf("RealNodeCapacities has %d entries for %d real nodes", len(o.RealNodeCapacities), o.RealNodes)
	case o.RealNodes == 0 && (o.ServiceNetwork || len(o.RealNodeImages) > 0 || len(o.RealNodeRegistries) > 0):
		return fmt.Errorf("ServiceNetwork, RealNodeImages and RealNodeRegistries need real nodes (RealNodes > 0)")
	}
	return checkWhereaboutsOptions(o)
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
	wb := o.IPAM == IPAMWhereabouts
	var sliceBits int
	if wb {
		capacity = whereaboutsCapacity(o)
		if sliceBits, err = whereaboutsSliceBits(capacity); err != nil {
			return err
		}
	}
	// host-local: a /24 per node; whereabouts: one /24 for the network.
	nets := o.RealNodes
	if wb {
		nets = 1
	}
	subnets, err := freeSubnets(nets)
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
	if o.ServiceNetwork {
		if err := checkTablesFree(fp.RunID); err != nil {
			return err
		}
	}
	if wb {
		if p.wb, err = p.setupWhereabouts(ctx, "capscale-"+fp.RunID, subnets[0], sliceBits); err != nil {
			return err
		}
		if err := p.wb.makeBinDir(p.bin("whereabouts")); err != nil {
			return err
		}
	}
	images = append(images, o.RealNodeImages...)
	for i := range o.RealNodes {
		if len(o.RealNodeCapacities) > 0 {
			capacity = o.RealNodeCapacities[i]
		}
		n := &RealNode{
			Name:       RealNodeName(i),
			Dir:        filepath.Join(base, fmt.Sprint(i)),
			Capacity:   capacity,
			Subnet:     subnets[min(i, len(subnets)-1)],
			Bridge:     fmt.Sprintf("cs%sn%d", fp.RunID, i),
			Network:    fmt.Sprintf("capscale-%s-%d", fp.RunID, i),
			CgroupRoot: fmt.Sprintf("/capscale-%s-%d", fp.RunID, i),
			services:   o.ServiceNetwork,
			plane:      p,
		}
		n.ContainerdSocket = filepath.Join(n.Dir, "containerd.sock")
		if wb {
			// The range is the slice's, known once the node has one.
			n.Gateway = p.wb.gateway(i)
		} else if n.Gateway, n.RangeStart, n.RangeEnd, err = rangeOf(n.Subnet, capacity); err != nil {
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
	if err := p.waitRealNodesReady(ctx, p.RealNodes); err != nil {
		return err
	}
	if !wb {
		return nil
	}
	if err := p.waitSlices(ctx, p.RealNodes); err != nil {
		return err
	}
	if o.ServiceNetwork {
		return routeSlices(p.RealNodes)
	}
	return nil
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

	// containerd, then the images (imported from tarballs; a test's own
	// registries, if any, for the images it pulls).
	files := map[string]func() ([]byte, error){
		"containerd.toml":                n.containerdConfig,
		"cni/net.d/10-capscale.conflist": n.cniConfig,
		"kubelet.yaml":                   func() ([]byte, error) { return n.kubeletConfig(p.PKI.ClusterCA.CertFile, p.Opts.KubeletFeatureGates) },
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
	if err := n.writeRegistryHosts(p.Opts.RealNodeRegistries); err != nil {
		return err
	}
	if n.services {
		if err := n.makeBridge(); err != nil {
			return err
		}
	}
	// whereabouts' plugin learns its node from NODENAME, which containerd
	// hands its CNI plugins with its own environment.
	var env []string
	if p.wb != nil {
		env = []string{"NODENAME=" + n.Name}
	}
	ctrd, err := p.StartProcessEnv("containerd-"+n.Name, "containerd", env, "--config", filepath.Join(n.Dir, "containerd.toml"))
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
		n.nodeLabels(),
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

// nodeLabels is the kubelet's --node-labels: the real-node label and, with
// host-local, the capacity label of the node's range. A whereabouts node's
// capacity is whereabouts' to say (a capacity source reads its slice).
func (n *RealNode) nodeLabels() string {
	if n.whereabouts() != nil {
		return fmt.Sprintf("--node-labels=%s=true", RealNodeLabel)
	}
	return fmt.Sprintf("--node-labels=%s=%d,%s=true", names.UnderlayIPCapacityLabel, n.Capacity, RealNodeLabel)
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
