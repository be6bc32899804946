package plane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Real nodes whose IPs whereabouts hands out (Options.IPAM = IPAMWhereabouts):
// whereabouts v0.9.2's CNI plugin and node-slice controller, built from
// their module (e2e/tools/whereabouts), with its CRDs and the
// NetworkAttachmentDefinition CRD read from the Go module cache. One
// whereabouts network spans the plane: a /24 range cut into slices of the
// node's capacity plus network and broadcast; the node-slice controller
// gives each Node a slice (NodeSlicePool status.allocations) and the plugin
// hands a node's pods the addresses of its slice, keeping them in an
// IPPool of the node's own. Both run with identities of their own.

// The real nodes' IPAMs.
const (
	IPAMHostLocal   = "host-local"
	IPAMWhereabouts = "whereabouts"
)

// DefaultWhereaboutsCapacity is the usable IPs of a whereabouts node slice
// by default: a /29.
const DefaultWhereaboutsCapacity = 6

// WhereaboutsNamespace is where whereabouts keeps its objects: the
// namespace of its kubeconfig's context, kube-system when it names none
// (pkg/storage/kubernetes/ipam.go wbNamespaceFromCtx), and the node-slice
// controller's WHEREABOUTS_NAMESPACE.
const WhereaboutsNamespace = "kube-system"

const (
	whereaboutsModule = "github.com/k8snetworkplumbingwg/whereabouts"
	nadModule         = "github.com/k8snetworkplumbingwg/network-attachment-definition-client"
)

// IPPoolsResource and NodeSlicePoolsResource are whereabouts' resources.
var (
	IPPoolsResource        = schema.GroupVersionResource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "ippools"}
	NodeSlicePoolsResource = schema.GroupVersionResource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "nodeslicepools"}
)

// whereaboutsNet is the plane's whereabouts network.
type whereaboutsNet struct {
	// Name is the network_name: the NodeSlicePool's name and the prefix
	// of every node's IPPool.
	Name string
	// Range is cut into slices of SliceBits host bits.
	Range     netip.Prefix
	SliceBits int
	// kubeconfig is the CNI plugin's; flatFile is whereabouts' flat
	// configuration file, which v0.9.2 requires to exist
	// (pkg/config/config.go GetFlatIPAM); binDir the CNI plugins' dir.
	kubeconfig, flatFile, binDir string
	dynamic                      dynamic.Interface
	// controller is the node-slice controller's process.
	controller *Process
}

// whereabouts is the node's whereabouts network, nil with host-local (or
// for a node no plane started, as in unit tests).
func (n *RealNode) whereabouts() *whereaboutsNet {
	if n.plane == nil {
		return nil
	}
	return n.plane.wb
}

// whereaboutsSliceBits returns the host bits of a slice whose usable IPs
// (all but network and broadcast: pkg/iphelpers/iphelpers.go:121-143) are
// capacity.
func whereaboutsSliceBits(capacity int) (int, error) {
	h := bits.Len(uint(capacity + 1))
	if capacity < 2 || capacity > 126 || 1<<h != capacity+2 {
		return 0, fmt.Errorf("a whereabouts node slice holds 2^n-2 IPs (its network and broadcast addresses are not handed out): 2, 6, 14, 30, 62 or 126, got %d", capacity)
	}
	return h, nil
}

// checkWhereaboutsOptions refuses what whereabouts real nodes cannot do.
func checkWhereaboutsOptions(o Options) error {
	switch o.IPAM {
	case "", IPAMHostLocal:
		return nil
	case IPAMWhereabouts:
	default:
		return fmt.Errorf("unknown IPAM %q (known: %s, %s)", o.IPAM, IPAMHostLocal, IPAMWhereabouts)
	}
	switch {
	case o.RealNodes == 0:
		return errors.New("IPAM whereabouts needs real nodes (RealNodes > 0)")
	case len(o.RealNodeCapacities) > 0:
		return errors.New("IPAM whereabouts gives every node a slice of the same size: RealNodeCapacities cannot be honoured")
	}
	h, err := whereaboutsSliceBits(whereaboutsCapacity(o))
	if err != nil {
		return err
	}
	// The slices are given to every Node, kwok ones too; the last one
	// holds the bridges' addresses, one per real node.
	slices, nodes := 1<<(8-h), o.RealNodes+max(o.Nodes, 0)
	if nodes+1 > slices || o.RealNodes > whereaboutsCapacity(o) {
		return fmt.Errorf("a /24 in slices of %d IPs gives %d slices: too few for %d nodes and one for %d bridges", whereaboutsCapacity(o), slices, nodes, o.RealNodes)
	}
	return nil
}

func whereaboutsCapacity(o Options) int {
	if o.RealNodeCapacity == 0 {
		return DefaultWhereaboutsCapacity
	}
	return o.RealNodeCapacity
}

// setupWhereabouts installs whereabouts' CRDs and the
// NetworkAttachmentDefinition CRD from their modules, gives the CNI plugin
// and the node-slice controller their identities and RBAC, declares the
// network and starts the controller.
func (p *Plane) setupWhereabouts(ctx context.Context, name string, rng netip.Prefix, sliceBits int) (*whereaboutsNet, error) {
	dyn, err := dynamic.NewForConfig(p.Config)
	if err != nil {
		return nil, err
	}
	wb := &whereaboutsNet{Name: name, Range: rng, SliceBits: sliceBits, dynamic: dyn,
		flatFile: filepath.Join(p.Dir, "whereabouts.conf"), binDir: filepath.Join(p.Dir, "real-nodes", "cni-bin")}
	wbDir, err := moduleDir(ctx, whereaboutsModule)
	if err != nil {
		return nil, err
	}
	nadDir, err := moduleDir(ctx, nadModule)
	if err != nil {
		return nil, err
	}
	crds := []string{
		filepath.Join(wbDir, "doc/crds/whereabouts.cni.cncf.io_ippools.yaml"),
		filepath.Join(wbDir, "doc/crds/whereabouts.cni.cncf.io_nodeslicepools.yaml"),
		filepath.Join(wbDir, "doc/crds/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml"),
		filepath.Join(nadDir, "artifacts/networks-crd.yaml"),
	}
	for _, f := range crds {
		if _, err := p.Kubectl(ctx, "apply", "--server-side", "-f", f); err != nil {
			return nil, err
		}
	}
	if _, err := p.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/ippools.whereabouts.cni.cncf.io", "crd/nodeslicepools.whereabouts.cni.cncf.io",
		"crd/overlappingrangeipreservations.whereabouts.cni.cncf.io", "crd/network-attachment-definitions.k8s.cni.cncf.io"); err != nil {
		return nil, err
	}
	if err := p.applyYAML(ctx, "whereabouts-rbac.yaml", whereaboutsRBAC); err != nil {
		return nil, err
	}
	if wb.kubeconfig, err = p.ServiceAccountKubeconfig(ctx, WhereaboutsNamespace, "whereabouts-cni"); err != nil {
		return nil, err
	}
	controllerKC, err := p.ServiceAccountKubeconfig(ctx, WhereaboutsNamespace, "whereabouts-node-slice-controller")
	if err != nil {
		return nil, err
	}
	// The flat file: only the datastore, which every network here shares.
	flat, err := json.Marshal(map[string]any{"datastore": "kubernetes", "kubernetes": map[string]string{"kubeconfig": wb.kubeconfig}})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(wb.flatFile, flat, 0o600); err != nil {
		return nil, err
	}
	// The network: the node-slice controller reads range and
	// node_slice_size from a NetworkAttachmentDefinition's config
	// (pkg/node-controller/controller.go:339-380).
	nad, err := json.Marshal(map[string]any{"cniVersion": "0.4.0", "name": name, "type": "bridge", "ipam": wb.ipam(netip.Addr{}, "", false)})
	if err != nil {
		return nil, err
	}
	if err := p.applyYAML(ctx, "whereabouts-network.yaml", fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: %s, namespace: %s}
spec:
  config: %q
`, name, WhereaboutsNamespace, nad)); err != nil {
		return nil, err
	}
	ctrl, err := p.StartProcessEnv("whereabouts-node-slice-controller", p.bin("whereabouts-node-slice-controller"),
		[]string{"WHEREABOUTS_NAMESPACE=" + WhereaboutsNamespace}, "--kubeconfig="+controllerKC, "--v=2")
	if err != nil {
		return nil, err
	}
	wb.controller = ctrl
	// Ready once it has made the network's NodeSlicePool.
	err = p.waitUntil(ctx, ctrl, time.Minute, "whereabouts' NodeSlicePool "+name, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(NodeSlicePoolsResource).Namespace(WhereaboutsNamespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	return wb, err
}

// whereaboutsRBAC gives each whereabouts component what its code calls,
// narrower than the one ClusterRole whereabouts ships for both
// (doc/crds/daemonset-install.yaml whereabouts-cni). The CNI plugin, in the
// whereabouts namespace: its node's IPPool (get, create; patch to allocate;
// list to check the connection), its NodeSlicePool (get), the cluster-wide
// reservations of overlapping ranges (on by default) and the leader-election
// Lease of its pool (pkg/storage/kubernetes/ipam.go:90-167, 186-241,
// 285-341, 393-455, 519-534). The node-slice controller: Nodes,
// NetworkAttachmentDefinitions and NodeSlicePools watched cluster-wide,
// NodeSlicePools written in its namespace (pkg/node-controller/controller.go).
const whereaboutsRBAC = `apiVersion: v1
kind: ServiceAccount
metadata: {name: whereabouts-cni, namespace: kube-system}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: whereabouts-node-slice-controller, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: capscale-e2e:whereabouts-cni, namespace: kube-system}
rules:
- apiGroups: [whereabouts.cni.cncf.io]
  resources: [ippools]
  verbs: [get, list, create, patch]
- apiGroups: [whereabouts.cni.cncf.io]
  resources: [nodeslicepools]
  verbs: [get]
- apiGroups: [whereabouts.cni.cncf.io]
  resources: [overlappingrangeipreservations]
  verbs: [get, create, delete]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: capscale-e2e:whereabouts-cni, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "capscale-e2e:whereabouts-cni"}
subjects: [{kind: ServiceAccount, name: whereabouts-cni, namespace: kube-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "capscale-e2e:whereabouts-node-slice-controller"}
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch]
- apiGroups: [k8s.cni.cncf.io]
  resources: [network-attachment-definitions]
  verbs: [list, watch]
- apiGroups: [whereabouts.cni.cncf.io]
  resources: [nodeslicepools]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "capscale-e2e:whereabouts-node-slice-controller"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "capscale-e2e:whereabouts-node-slice-controller"}
subjects: [{kind: ServiceAccount, name: whereabouts-node-slice-controller, namespace: kube-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: "capscale-e2e:whereabouts-node-slice-controller", namespace: kube-system}
rules:
- apiGroups: [whereabouts.cni.cncf.io]
  resources: [nodeslicepools]
  verbs: [create, update, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "capscale-e2e:whereabouts-node-slice-controller", namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "capscale-e2e:whereabouts-node-slice-controller"}
subjects: [{kind: ServiceAccount, name: whereabouts-node-slice-controller, namespace: kube-system}]
`

// applyYAML writes doc into the plane's directory as file and applies it.
func (p *Plane) applyYAML(ctx context.Context, file, doc string) error {
	path := filepath.Join(p.Dir, file)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		return err
	}
	_, err := p.Kubectl(ctx, "apply", "-f", path)
	return err
}

// moduleDir is where the Go module cache holds mod at the version
// e2e/tools/whereabouts pins (build.sh has downloaded it).
func moduleDir(ctx context.Context, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", mod)
	cmd.Dir = filepath.Join(RepoRoot(), "e2e", "tools", "whereabouts")
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("finding %s in the Go module cache (make control-plane builds whereabouts): %v: %s", mod, err, out)
	}
	return dir, nil
}

// makeBinDir is the CNI plugins' directory of the plane's real nodes:
// Debian's plugins and whereabouts, linked.
func (wb *whereaboutsNet) makeBinDir(whereabouts string) error {
	if _, err := os.Stat(whereabouts); err != nil {
		return fmt.Errorf("whereabouts' CNI plugin: %w (make control-plane)", err)
	}
	if err := os.MkdirAll(wb.binDir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(cniBinDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(cniBinDir, e.Name()), filepath.Join(wb.binDir, e.Name())); err != nil {
			return err
		}
	}
	return os.Symlink(whereabouts, filepath.Join(wb.binDir, "whereabouts"))
}

// ipam is the whereabouts IPAM configuration of the network: a node's
// bridge adds its gateway (the bridge's address) and the plugin's log, and
// with the service network the routes through it (whereabouts hands
// ipam.routes to the pod as they are: cmd/whereabouts.go:80).
func (wb *whereaboutsNet) ipam(gateway netip.Addr, logFile string, services bool) map[string]any {
	ipam := map[string]any{
		"type":               "whereabouts",
		"range":              wb.Range.String(),
		"node_slice_size":    "/" + strconv.Itoa(32-wb.SliceBits),
		"network_name":       wb.Name,
		"configuration_path": wb.flatFile,
		"kubernetes":         map[string]string{"kubeconfig": wb.kubeconfig},
	}
	if gateway.IsValid() {
		ipam["gateway"] = gateway.String()
	}
	if logFile != "" {
		ipam["log_file"], ipam["log_level"] = logFile, "debug"
	}
	if services {
		ipam["routes"] = serviceRoutes()
	}
	return ipam
}

// routeSlices routes each node's slice to its bridge on the host. Every
// bridge holds an address of the one range with its whole prefix, so the
// host has the range on each bridge and would reach every pod through the
// first; a slice's route is more specific. The service network needs it:
// kube-proxy's and the kubernetes Service's replies, the kubelet's probes
// and the apiserver's calls to a pod (an APIService) go from the host to
// the pod. The routes go with the bridges.
func routeSlices(nodes []*RealNode) error {
	for _, n := range nodes {
		if out, err := exec.Command("ip", "route", "replace", n.Slice.String(), "dev", n.Bridge).CombinedOutput(); err != nil {
			return fmt.Errorf("routing %s's slice %s to %s: %w: %s", n.Name, n.Slice, n.Bridge, err, out)
		}
	}
	return nil
}

// gateway is the bridge address of the i-th real node: the network's .254,
// .253, ... in its last slice, which no node gets while there are fewer
// Nodes than slices (assignNodeToSlice takes the first free slice,
// pkg/node-controller/controller.go:601-614).
func (wb *whereaboutsNet) gateway(i int) netip.Addr {
	a := wb.Range.Masked().Addr().As4()
	a[3] = byte(254 - i)
	return netip.AddrFrom4(a)
}

// waitSlices waits until the node-slice controller has given every real
// node its slice, and records each node's slice and first and last IPs.
func (p *Plane) waitSlices(ctx context.Context, nodes []*RealNode) error {
	wb := p.wb
	return p.waitUntil(ctx, nil, time.Minute, "whereabouts slices for the real nodes", func(ctx context.Context) (bool, error) {
		u, err := wb.dynamic.Resource(NodeSlicePoolsResource).Namespace(WhereaboutsNamespace).Get(ctx, wb.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		status, _ := u.Object["status"].(map[string]any)
		allocs, _ := status["allocations"].([]any)
		slices := map[string]string{}
		for _, a := range allocs {
			if m, ok := a.(map[string]any); ok {
				n, _ := m["nodeName"].(string)
				r, _ := m["sliceRange"].(string)
				slices[n] = r
			}
		}
		for _, n := range nodes {
			s, ok := slices[n.Name]
			if !ok {
				return false, nil
			}
			pre, err := netip.ParsePrefix(s)
			if err != nil {
				return false, fmt.Errorf("NodeSlicePool %s gives %s the slice %q: %w", wb.Name, n.Name, s, err)
			}
			n.Slice, n.RangeStart, n.RangeEnd = pre, pre.Addr().Next(), lastAddr(pre).Prev()
		}
		return true, nil
	})
}

// lastAddr is the last address of p (its broadcast, for IPv4).
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ipPoolName is the name of the node's IPPool: <network>-<node>-<slice>
// with "/" as "-" (pkg/storage/kubernetes/ipam.go:106-134).
func (wb *whereaboutsNet) ipPoolName(node string, slice netip.Prefix) string {
	return wb.Name + "-" + node + "-" + strings.ReplaceAll(slice.String(), "/", "-")
}

// allocatedIPs reads the addresses whereabouts has handed out on node n:
// its IPPool's allocations, keyed by offset from the slice's first address
// (ipam.go:243-269).
func (wb *whereaboutsNet) allocatedIPs(n *RealNode) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := wb.dynamic.Resource(IPPoolsResource).Namespace(WhereaboutsNamespace).Get(ctx, wb.ipPoolName(n.Name, n.Slice), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil // made at the node's first pod
	}
	if err != nil {
		return nil, err
	}
	spec, _ := u.Object["spec"].(map[string]any)
	allocs, _ := spec["allocations"].(map[string]any)
	var ips []netip.Addr
	for off := range allocs {
		k, err := strconv.ParseUint(off, 10, 8)
		if err != nil {
			return nil, fmt.Errorf("IPPool %s: allocation %q: %w", u.GetName(), off, err)
		}
		a := n.Slice.Masked().Addr().As4()
		a[3] += byte(k)
		ips = append(ips, netip.AddrFrom4(a))
	}
	return ips, nil
}
