package plane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// The service network of real nodes (Options.ServiceNetwork): what a real
// cluster gives its pods, so that capscale's own components can run as
// pods. Two parts, both on the host's network namespace, which every real
// node shares:
//
//   - kube-proxy v1.37.2, built from its module like the kubelet, in
//     nftables mode: every Service's ClusterIP, in its own tables (ip and
//     ip6 "kube-proxy"), node ports only on the bridges' addresses, the
//     conntrack settings left alone, every service packet masqueraded (so
//     a reply from a pod on the client's own bridge comes back through the
//     host). One kube-proxy for the host, named for the first node.
//   - The Service "kubernetes": the apiserver listens on 127.0.0.1 only,
//     which no EndpointSlice may name, so kube-proxy has no endpoint for
//     it. The plane's own table sends the pods' packets for its ClusterIP
//     to 127.0.0.1 (a DNAT ahead of kube-proxy's), which the kernel
//     accepts from a bridge with route_localnet set: set on the plane's
//     own bridges only, made before the CNI plugin would.

const (
	// serviceCIDR is kube-apiserver's --service-cluster-ip-range;
	// kubernetesServiceIP is the ClusterIP of default/kubernetes in it.
	serviceCIDR         = "10.0.0.0/24"
	kubernetesServiceIP = "10.0.0.1"
	// kubeProxyTable is the name of kube-proxy's nftables tables.
	kubeProxyTable = "kube-proxy"
)

// serviceTables are the nftables tables of a run's service network.
func serviceTables(runID string) []string {
	return []string{"ip " + kubeProxyTable, "ip6 " + kubeProxyTable, "ip capscale-" + runID}
}

// makeBridge creates a node's bridge before the CNI plugin does (which
// then uses it), with route_localnet: the kubernetes Service's packets are
// sent on to 127.0.0.1.
func (n *RealNode) makeBridge() error {
	if out, err := exec.Command("ip", "link", "add", "name", n.Bridge, "type", "bridge").CombinedOutput(); err != nil {
		return fmt.Errorf("creating bridge %s: %w: %s", n.Bridge, err, out)
	}
	if out, err := exec.Command("ip", "link", "set", n.Bridge, "up").CombinedOutput(); err != nil {
		return fmt.Errorf("bringing bridge %s up: %w: %s", n.Bridge, err, out)
	}
	return os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", n.Bridge, "route_localnet"), []byte("1\n"), 0o644)
}

// startServiceNetwork records the tables, writes the plane's own table and
// starts kube-proxy, then waits until kube-proxy has synced its rules.
func (p *Plane) startServiceNetwork(ctx context.Context, apiserverPort int) error {
	fp := p.footprint
	first := p.RealNodes[0]
	tables := serviceTables(fp.RunID)
	fp.Tables = tables
	if err := fp.save(); err != nil {
		return err
	}
	// A DNAT ahead of kube-proxy's (dstnat is -100): once a connection has
	// its destination, later nat chains of the hook are not consulted.
	rules := fmt.Sprintf(`table %s {
	chain kubernetes-service {
		type nat hook prerouting priority dstnat - 10; policy accept;
		iifname "cs%sn*" ip daddr %s tcp dport 443 dnat to 127.0.0.1:%d
	}
}
`, tables[2], fp.RunID, kubernetesServiceIP, apiserverPort)
	nft := exec.CommandContext(ctx, "nft", "-f", "-")
	nft.Stdin = strings.NewReader(rules)
	if out, err := nft.CombinedOutput(); err != nil {
		return fmt.Errorf("adding the kubernetes Service's rule: %w: %s\n%s", err, out, rules)
	}

	cert, err := p.PKI.ClusterCA.Issue(p.PKI.Dir, "kube-proxy", CertSpec{CommonName: "system:kube-proxy", Client: true})
	if err != nil {
		return err
	}
	kc, err := p.writeCertKubeconfig("kube-proxy", cert)
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	// Subnets of the nodes' bridges: node ports (none of capscale's) on
	// their addresses only, never on the host's own.
	cfg := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]any{"kubeconfig": kc},
		"hostnameOverride":   first.Name,
		"mode":               "nftables",
		"healthzBindAddress": fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"metricsBindAddress": fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"nodePortAddresses":  []string{subnetBase.String()},
		"nftables":           map[string]any{"masqueradeAll": true, "syncPeriod": "30s", "minSyncPeriod": "0s"},
		// Zero: kube-proxy leaves the host's conntrack settings alone.
		"conntrack": map[string]any{
			"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
		},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	// In the first node's directory: the node's cleanup kills kube-proxy
	// with the node's own processes.
	cfgFile := filepath.Join(first.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		return err
	}
	proc, err := p.StartProcess("kube-proxy", p.bin("kube-proxy"), "--config="+cfgFile, "--v=1")
	if err != nil {
		return err
	}
	// Healthy once its first sync wrote the rules.
	return p.waitHTTP(ctx, proc, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[0]), nil)
}

// existingTables lists the host's nftables tables ("family name").
func existingTables() ([]string, error) {
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w: %s", err, out)
	}
	var ts []string
	for _, l := range strings.Split(string(out), "\n") {
		if t, ok := strings.CutPrefix(strings.TrimSpace(l), "table "); ok {
			ts = append(ts, t)
		}
	}
	return ts, nil
}

// checkTablesFree refuses a service network where one of its tables
// exists: another kube-proxy runs on this host, and its rules are not ours
// to replace or delete.
func checkTablesFree(runID string) error {
	have, err := existingTables()
	if err != nil {
		return err
	}
	for _, t := range serviceTables(runID) {
		if slices.Contains(have, t) {
			return fmt.Errorf("the nftables table %q exists already (another kube-proxy on this host?): a plane's service network would replace it", t)
		}
	}
	return nil
}

// deleteTables removes the run's tables that exist.
func deleteTables(tables []string) []error {
	have, err := existingTables()
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, t := range tables {
		if !slices.Contains(have, t) {
			continue
		}
		if out, err := exec.Command("nft", append([]string{"delete", "table"}, strings.Fields(t)...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("nft delete table %s: %w: %s", t, err, out))
		}
	}
	return errs
}
