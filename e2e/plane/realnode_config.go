package plane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/nodeimage"
)

// The configuration files of a real node's containerd, CNI network and
// kubelet. Every path they name is the node's own (n.Dir) unless the
// component offers no setting for it; docs/development.md "Real nodes" lists
// what they still write outside it and how cleanup finds it.

// containerdConfig is containerd 1.6's configuration (version 2).
// The CRI's registry config_path (containerd 1.5+; the mirrors and configs
// tables are deprecated) is the node's own directory of hosts.toml files.
// restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, and runc fails
// with "can't get final child's PID from pipe" when it may not lower a
// container's oom_score_adj below its own. The runc options' Root keeps
// runc's state in the node's directory instead of /run/containerd/runc;
// netns_mounts_under_state_dir keeps the pods' network namespaces there
// instead of /var/run/netns. The opt plugin would create /opt/containerd.
var containerdConfig = template.Must(template.New("containerd").Parse(`version = 2
root = "{{.Dir}}/containerd/root"
state = "{{.Dir}}/containerd/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{{.ContainerdSocket}}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.SandboxImage}}"
  restrict_oom_score_adj = true
  systemd_cgroup = false
  netns_mounts_under_state_dir = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  max_container_log_line_size = 16384

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{{.Dir}}/containerd/runc"

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{{.RegistryConfigDir}}"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBinDir}}"
    conf_dir = "{{.Dir}}/cni/net.d"
    max_conf_num = 1
`))

func (n *RealNode) containerdConfig() ([]byte, error) {
	var b bytes.Buffer
	err := containerdConfig.Execute(&b, struct {
		*RealNode
		SandboxImage, CNIBinDir, RegistryConfigDir string
	}{n, nodeimage.Pause, n.cniBinDir(), n.registryConfigDir()})
	return b.Bytes(), err
}

// registryConfigDir is containerd's registry config_path: one directory
// per registry host (host:port), each with a hosts.toml.
func (n *RealNode) registryConfigDir() string { return filepath.Join(n.Dir, "containerd", "certs.d") }

// RegistryHostsFile is the hosts.toml that tells the node's containerd how
// to reach the registry host (host:port). containerd reads it on each pull.
func (n *RealNode) RegistryHostsFile(host string) string {
	return filepath.Join(n.registryConfigDir(), host, "hosts.toml")
}

// registryHosts is the hosts.toml of a registry at host (host:port) served
// over scheme: pulls and tag resolution go to scheme://host, nowhere else.
func registryHosts(scheme, host string) []byte {
	return []byte(fmt.Sprintf(`server = "%[1]s://%[2]s"

[host."%[1]s://%[2]s"]
  capabilities = ["pull", "resolve"]
`, scheme, host))
}

// writeRegistryHosts writes the hosts.toml of each plain-HTTP registry.
// containerd 1.6 would also try plain HTTP on its own for a loopback host
// without one (its localhost default), but not for any other host, and
// only the file says what this node was told.
func (n *RealNode) writeRegistryHosts(hosts []string) error {
	for _, h := range hosts {
		f := n.RegistryHostsFile(h)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, registryHosts("http", h), 0o644); err != nil {
			return fmt.Errorf("writing %s's hosts.toml for %s: %w", n.Name, h, err)
		}
	}
	return nil
}

// cniConfig is the node's pod network: a bridge of its own and host-local
// IPAM whose range holds exactly the node's capacity, with its allocations
// in the node's directory (dataDir), one file per IP handed out. The bridge
// is the range's gateway (.1) so that the host reaches the pods; no
// masquerade, so no firewall rule. With the service network, the pods
// route the service range and the other nodes' pods through it: no default
// route, so nothing of theirs leaves for the host's own networks.
func (n *RealNode) cniConfig() ([]byte, error) {
	if wb := n.whereabouts(); wb != nil {
		return cniConfList(n, wb.ipam(n.Gateway, filepath.Join(n.Dir, "whereabouts.log"), n.services))
	}
	ipam := map[string]any{
		"type":    "host-local",
		"dataDir": n.ipamDataDir(),
		"ranges": [][]map[string]string{{{
			"subnet":     n.Subnet.String(),
			"rangeStart": n.RangeStart.String(),
			"rangeEnd":   n.RangeEnd.String(),
			"gateway":    n.Gateway.String(),
		}}},
	}
	if n.services {
		ipam["routes"] = serviceRoutes()
	}
	return cniConfList(n, ipam)
}

// serviceRoutes are a pod's routes through its bridge with the service
// network: the service range and the other nodes' pods.
func serviceRoutes() []map[string]string {
	return []map[string]string{{"dst": serviceCIDR}, {"dst": subnetBase.String()}}
}

// cniConfList is the node's network: its bridge, with ipam.
func cniConfList(n *RealNode, ipam map[string]any) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "0.4.0",
		"name":       n.Network,
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      n.Bridge,
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": false,
			"ipam":        ipam,
		}},
	}, "", "  ")
}

// cniBinDir is where the node's containerd finds its CNI plugins:
// Debian's, or the plane's directory with whereabouts beside them.
func (n *RealNode) cniBinDir() string {
	if n.whereabouts() != nil {
		return n.whereabouts().binDir
	}
	return cniBinDir
}

// kubeletConfig is the node's KubeletConfiguration. Each setting departs
// from the default for a reason of this machine kind or of sharing it:
//   - failCgroupV1: false: v1.35+ refuses cgroup v1 hosts otherwise;
//   - cgroupDriver cgroupfs (no systemd) under a cgroupRoot of the node's
//     own, so that two nodes never share a kubepods cgroup;
//   - failSwapOn: false, the host may have swap;
//   - makeIPTablesUtilChains: false: otherwise the kubelet writes rules
//     into the host's filter, mangle and nat tables (one a DROP of traffic
//     to 127/8 not from 127/8);
//   - imageGCHighThresholdPercent: 100: the images were imported, not
//     pulled, and could not be pulled again;
//   - evictionHard near zero: a busy shared disk must not evict test pods;
//   - podLogsDir in the node's directory, not /var/log/pods (the kubelet's
//     flags move its certificates and volume plugins);
//   - 127.0.0.1 listeners on ports of the node's own, authenticated by the
//     plane's CA only.
func (n *RealNode) kubeletConfig(clientCA string, gates map[string]bool) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"address":                     "127.0.0.1",
		"port":                        n.Port,
		"readOnlyPort":                0,
		"healthzBindAddress":          "127.0.0.1",
		"healthzPort":                 n.HealthzPort,
		"containerRuntimeEndpoint":    "unix://" + n.ContainerdSocket,
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  n.CgroupRoot,
		"cgroupsPerQOS":               true,
		"failCgroupV1":                false,
		"failSwapOn":                  false,
		"makeIPTablesUtilChains":      false,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
			"imagefs.available": "1%", "imagefs.inodesFree": "1%",
		},
		"podLogsDir": n.PodLogsDir(),
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": clientCA},
		},
		"authorization":       map[string]any{"mode": "AlwaysAllow"},
		"serializeImagePulls": false,
		"maxPods":             110,
	}
	if len(gates) > 0 {
		cfg["featureGates"] = gates
	}
	return yaml.Marshal(cfg)
}

// rangeOf returns the addresses of a node's pool in subnet: .2 up to
// .capacity+1; the gateway (the bridge) is .1.
func rangeOf(subnet netip.Prefix, capacity int) (gateway, start, end netip.Addr, err error) {
	if capacity < 1 || capacity > 253 {
		return gateway, start, end, fmt.Errorf("a real node's capacity must be 1..253 (a /24 less network, gateway and broadcast), got %d", capacity)
	}
	a := subnet.Masked().Addr().As4()
	a[3] = 1
	gateway = netip.AddrFrom4(a)
	a[3] = 2
	start = netip.AddrFrom4(a)
	a[3] = byte(capacity + 1)
	end = netip.AddrFrom4(a)
	return gateway, start, end, nil
}
