// Package plane runs a real Kubernetes control plane on 127.0.0.1: etcd,
// kube-apiserver (with the aggregation layer), kube-controller-manager,
// kube-scheduler and kwok for nodes, all as processes built from their Go
// modules. End-to-end tests and `make local-up` bring it up in one call.
package plane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/mod/modfile"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/nodeimage"
)

// Options shape the plane. The zero value gives 3 nodes of 32 CPU, 256Gi and
// 110 pods, the default scheduler profile and a 15s HPA sync.
type Options struct {
	// BinDir holds the control-plane binaries; default $CAPSCALE_BIN_DIR or
	// <repo>/_output/bin (see e2e/tools/build.sh).
	BinDir string
	// Dir is the working directory (PKI, kubeconfigs, logs, etcd data);
	// default a new temp dir, removed by Stop unless KeepDir.
	Dir     string
	KeepDir bool
	// Nodes is the number of kwok nodes (default 3, negative for none);
	// NodeShape their size; Node may
	// adjust each node before it is created (annotations, capacity).
	Nodes     int
	NodeShape NodeShape
	Node      func(i int, n *corev1.Node)
	// SchedulerConfig is a KubeSchedulerConfiguration in YAML; the harness
	// sets clientConnection.kubeconfig and disables leader election.
	SchedulerConfig string
	// SchedulerBinary replaces BinDir/kube-scheduler as the plane's
	// scheduler and StartScheduler's (plugin mode: capscale-scheduler).
	SchedulerBinary string
	// HPASyncPeriod is kube-controller-manager's HPA sync period.
	HPASyncPeriod time.Duration
	// NodeLeaseDuration is the kwok nodes' Lease duration (default 40s, the
	// kubelet's); they renew every quarter of it. Longer leases quiet the
	// heartbeats of thousands of nodes, and kube-controller-manager's node
	// grace period grows with them.
	NodeLeaseDuration time.Duration
	// Extra flags for the components.
	ExtraAPIServerFlags, ExtraControllerManagerFlags, ExtraSchedulerFlags []string
	// KubeletFeatureGates are the real nodes' kubelets' featureGates.
	KubeletFeatureGates map[string]bool
	// RealNodes starts this many real nodes beside the kwok nodes: a
	// kubelet with its own containerd and a pod network whose IPAM holds
	// RealNodeCapacity addresses (realnode.go). They need root and the
	// packages of `make deps`; Start fails, saying what is missing.
	RealNodes int
	// RealNodeCapacity is each real node's pool of pod IPs (1..253,
	// default 10): its host-local range holds exactly that many, and it
	// registers with the capscale.io/underlay-ip-capacity label of that value.
	// With IPAM whereabouts, the usable IPs of each node's slice: 2, 6, 14,
	// 30, 62 or 126 (default 6), and no label.
	RealNodeCapacity int
	// IPAM is the real nodes' IPAM: IPAMHostLocal (the default) or
	// IPAMWhereabouts, whereabouts v0.9.2 with node slices
	// (realnode_whereabouts.go).
	IPAM string
	// RealNodeRegistries are plain-HTTP registries (host:port, e.g. a
	// go-containerregistry registry on 127.0.0.1) the real nodes'
	// containerd pulls from: each gets a hosts.toml in the node's own
	// registry config_path (realnode_config.go).
	RealNodeRegistries []string
	// RealNodeCapacities, when set, gives each real node its own capacity
	// (one entry per node), instead of RealNodeCapacity.
	RealNodeCapacities []int
	// RealNodeImages are imported on every real node beside the plane's
	// own images (docker-archive tarballs, e.g. nodeimage.WriteDockerArchive).
	RealNodeImages []nodeimage.Image
	// ServiceNetwork gives the real nodes' pods what a real cluster gives
	// them: Services (kube-proxy) and the apiserver through the Service
	// "kubernetes" (realnode_services.go).
	ServiceNetwork bool
	// Karpenter starts Karpenter with its KWOK cloud provider once the
	// nodes are up (karpenter.go; `make karpenter deploy-tools`): its
	// CRDs, its chart's RBAC and the process as its own ServiceAccount.
	// The test brings the KWOKNodeClass, NodePools and NodeOverlays.
	Karpenter bool
	// Detach leaves the processes running when this process exits
	// (`make local-up`); Stop or StopPid ends them.
	Detach bool
	// Logf reports progress; default silent.
	Logf func(format string, args ...any)
}

// NodeShape is the status capacity (and allocatable) of every kwok node.
type NodeShape struct {
	CPU, Memory, Pods string
}

// Plane is a running control plane.
type Plane struct {
	Opts Options
	Dir  string
	PKI  *PKI
	// APIServerURL is https://127.0.0.1:PORT.
	APIServerURL string
	// SchedulerURL is kube-scheduler's secure port, https://127.0.0.1:PORT
	// (its /metrics takes the admin client certificate).
	SchedulerURL string
	// Kubeconfig is the admin (system:masters) kubeconfig file.
	Kubeconfig string
	// AuditLog is kube-apiserver's audit log (JSON lines, one event per
	// mutating request at Metadata level; see auditPolicy).
	AuditLog string
	Config   *rest.Config
	Client   kubernetes.Interface
	// RealNodes are the running real nodes (Options.RealNodes).
	RealNodes []*RealNode
	// Karpenter is the Karpenter process (Options.Karpenter), nil without.
	Karpenter *Process

	logDir string
	mu     sync.Mutex
	procs  []*Process
	// footprint records what the real nodes created on the host.
	footprint *footprint
	// wb is the real nodes' whereabouts network (IPAM whereabouts).
	wb *whereaboutsNet
}

// SchedulerEndpoint is SchedulerURL, read under the lock a restart of the
// scheduler writes it under.
func (p *Plane) SchedulerEndpoint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.SchedulerURL
}

const defaultSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
`

// Start brings the plane up and returns once nodes are Ready and the default
// ServiceAccount exists. On error everything started is stopped again.
func Start(ctx context.Context, o Options) (p *Plane, err error) {
	o = withDefaults(o)
	if err := checkRealNodeOptions(o); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "capscale-plane-"); err != nil {
			return nil, err
		}
	}
	p = &Plane{Opts: o, Dir: dir, logDir: filepath.Join(dir, "logs")}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, p.LogTails(30))
			p.Stop()
		}
	}()
	if err = os.MkdirAll(p.logDir, 0o755); err != nil {
		return p, err
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if _, err = os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return p, fmt.Errorf("control-plane binary missing (run `make control-plane`): %w", err)
		}
	}
	if p.PKI, err = newPKI(filepath.Join(dir, "pki")); err != nil {
		return p, fmt.Errorf("creating PKI: %w", err)
	}
	ports, err := freePorts(6)
	if err != nil {
		return p, err
	}
	etcdPort, etcdPeer, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	p.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	o.Logf("starting etcd on 127.0.0.1:%d", etcdPort)
	if err = p.startEtcd(ctx, etcdPort, etcdPeer); err != nil {
		return p, err
	}
	o.Logf("starting kube-apiserver on %s", p.APIServerURL)
	if err = p.startAPIServer(ctx, apiPort, etcdPort); err != nil {
		return p, err
	}
	o.Logf("starting kube-controller-manager and kube-scheduler")
	if err = p.startControllerManager(ctx, kcmPort); err != nil {
		return p, err
	}
	if err = p.startScheduler(ctx, schedPort); err != nil {
		return p, err
	}
	o.Logf("starting kwok and %d nodes", o.Nodes)
	if err = p.startKwok(kwokPort); err != nil {
		return p, err
	}
	if err = p.createNodes(ctx); err != nil {
		return p, err
	}
	if o.RealNodes > 0 {
		o.Logf("starting %d real nodes (kubelet, containerd, a CNI bridge each)", o.RealNodes)
		realStart := time.Now()
		if err = p.startRealNodes(ctx); err != nil {
			return p, err
		}
		if o.ServiceNetwork {
			if err = p.startServiceNetwork(ctx, apiPort); err != nil {
				return p, err
			}
		}
		o.Logf("%d real nodes Ready in %.1fs (images built and imported, containerd and kubelet started)", o.RealNodes, time.Since(realStart).Seconds())
		for _, n := range p.RealNodes {
			o.Logf("real node %s Ready in %.1fs: pod IPs %s-%s on bridge %s", n.Name, n.Started.Seconds(), n.RangeStart, n.RangeEnd, n.Bridge)
		}
	}
	if err = p.waitDefaultServiceAccount(ctx, metav1.NamespaceDefault); err != nil {
		return p, err
	}
	if o.Karpenter {
		o.Logf("starting Karpenter (kwok provider)")
		if p.Karpenter, err = p.StartKarpenter(ctx); err != nil {
			return p, err
		}
	}
	o.Logf("control plane ready in %s", dir)
	return p, nil
}

// ToolDir holds the plane's binaries and helm: CAPSCALE_BIN_DIR, else
// the repository's _output/bin (make control-plane, make deploy-tools).
func ToolDir() string {
	if d := os.Getenv("CAPSCALE_BIN_DIR"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "_output", "bin")
}

func withDefaults(o Options) Options {
	if o.BinDir == "" {
		o.BinDir = ToolDir()
	}
	switch {
	case o.Nodes == 0:
		o.Nodes = 3
	case o.Nodes < 0: // none: the real nodes alone
		o.Nodes = 0
	}
	if o.NodeShape.CPU == "" {
		o.NodeShape.CPU = "32"
	}
	if o.NodeShape.Memory == "" {
		o.NodeShape.Memory = "256Gi"
	}
	if o.NodeShape.Pods == "" {
		o.NodeShape.Pods = "110"
	}
	if o.SchedulerConfig == "" {
		o.SchedulerConfig = defaultSchedulerConfig
	}
	if o.HPASyncPeriod == 0 {
		o.HPASyncPeriod = 15 * time.Second
	}
	if o.NodeLeaseDuration == 0 {
		o.NodeLeaseDuration = defaultNodeLease
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// RepoRoot finds the directory holding go.mod of the capscale module: the
// nearest at or above the working directory (a test binary runs in its
// package's directory, a command from the checkout), else where this file
// was compiled, which a -trimpath build (hack/e2e.sh's, to share make
// build's compiled packages) does not record.
func RepoRoot() string {
	if dir, err := os.Getwd(); err == nil {
		for d := dir; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && modfile.ModulePath(b) == capscaleModule {
				return d
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

const capscaleModule = "github.com/capscale/capscale"

func (p *Plane) bin(name string) string { return filepath.Join(p.Opts.BinDir, name) }

// schedulerBin is Opts.SchedulerBinary, else BinDir/kube-scheduler.
func (p *Plane) schedulerBin() string {
	if p.Opts.SchedulerBinary != "" {
		return p.Opts.SchedulerBinary
	}
	return p.bin("kube-scheduler")
}

// StartProcess starts any binary as part of the plane (capscale's own
// components); it is stopped with the plane and its log is part of LogTails.
func (p *Plane) StartProcess(name, bin string, args ...string) (*Process, error) {
	return p.StartProcessEnv(name, bin, nil, args...)
}

// StartProcessEnv is StartProcess with env (KEY=VALUE) added to the
// process's environment.
func (p *Plane) StartProcessEnv(name, bin string, env []string, args ...string) (*Process, error) {
	proc, err := startProcess(p.logDir, name, bin, args, env, p.Opts.Detach)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.procs = append(p.procs, proc)
	p.mu.Unlock()
	return proc, nil
}

// Processes lists every process started, in start order.
func (p *Plane) Processes() []*Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Process(nil), p.procs...)
}

// Stop ends every process, newest first, and removes the working directory
// unless KeepDir was set.
func (p *Plane) Stop() {
	// Real nodes first: their cleanup kills the kubelets before the
	// apiserver goes, and must unmount before the directory is removed.
	if err := p.StopRealNodes(); err != nil {
		p.Opts.Logf("cleaning up real nodes: %v", err)
	}
	procs := p.Processes()
	var wg sync.WaitGroup
	// Clients first (they would log errors while servers go), then the
	// apiserver, then etcd.
	stopGroup := func(ps []*Process) {
		for _, proc := range ps {
			wg.Add(1)
			go func() { defer wg.Done(); proc.Stop(3 * time.Second) }()
		}
		wg.Wait()
	}
	var clients, servers []*Process
	for _, proc := range procs {
		if proc.Name == "kube-apiserver" || proc.Name == "etcd" {
			servers = append(servers, proc)
		} else {
			clients = append(clients, proc)
		}
	}
	stopGroup(clients)
	for i := len(servers) - 1; i >= 0; i-- {
		servers[i].Stop(3 * time.Second)
	}
	if !p.Opts.KeepDir && p.Opts.Dir == "" {
		os.RemoveAll(p.Dir)
	}
}

// SaveLogs copies every component's log into dir, so that a long run's
// logs outlive the plane's working directory.
func (p *Plane) SaveLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, proc := range p.Processes() {
		if seen[proc.LogFile] {
			continue // a restarted process appends to the same file
		}
		seen[proc.LogFile] = true
		if err := copyFile(proc.LogFile, filepath.Join(dir, filepath.Base(proc.LogFile))); err != nil {
			return err
		}
	}
	return nil
}

// copyFile streams src to dst: a long run's logs are tens of MiB.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// LogTails returns the last n lines of every component's log, for failures.
func (p *Plane) LogTails(n int) string {
	var s string
	for _, proc := range p.Processes() {
		exited, err := proc.Exited()
		state := "running"
		if exited {
			state = fmt.Sprintf("exited: %v", err)
		}
		s += fmt.Sprintf("----- %s (%s) %s -----\n%s\n", proc.Name, state, proc.LogFile, proc.Tail(n))
	}
	return s
}

// DumpLogs writes LogTails to w.
func (p *Plane) DumpLogs(w io.Writer, n int) { fmt.Fprint(w, p.LogTails(n)) }

func (p *Plane) startEtcd(ctx context.Context, port, peer int) error {
	client := fmt.Sprintf("http://127.0.0.1:%d", port)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	proc, err := p.StartProcess("etcd", p.bin("etcd"),
		"--name=capscale-e2e",
		"--data-dir="+filepath.Join(p.Dir, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=capscale-e2e="+peerURL,
		"--unsafe-no-fsync", "--quota-backend-bytes=4294967296",
		"--log-level=warn")
	if err != nil {
		return err
	}
	return p.waitHTTP(ctx, proc, client+"/health", nil)
}

// auditPolicy logs who made every write, and nothing else, so that tests can
// check who a component acted as.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

func (p *Plane) startAPIServer(ctx context.Context, port, etcdPort int) error {
	k := p.PKI
	policy := filepath.Join(p.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return err
	}
	p.AuditLog = filepath.Join(p.logDir, "audit.log")
	args := []string{
		"--audit-policy-file=" + policy, "--audit-log-path=" + p.AuditLog,
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdPort),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + k.APIServer.CertFile, "--tls-private-key-file=" + k.APIServer.KeyFile,
		"--client-ca-file=" + k.ClusterCA.CertFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + k.ServiceAccountPub,
		"--service-account-signing-key-file=" + k.ServiceAccountKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--requestheader-client-ca-file=" + k.FrontProxy.CertFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + k.FrontProxyClient.CertFile,
		"--proxy-client-key-file=" + k.FrontProxyClient.KeyFile,
		"--enable-aggregator-routing=true",
		"--profiling=false",
	}
	proc, err := p.StartProcess("kube-apiserver", p.bin("kube-apiserver"), append(args, p.Opts.ExtraAPIServerFlags...)...)
	if err != nil {
		return err
	}
	admin, err := k.ClusterCA.Issue(k.Dir, "admin", CertSpec{CommonName: "capscale-e2e-admin", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		return err
	}
	if p.Kubeconfig, err = p.writeCertKubeconfig("admin", admin); err != nil {
		return err
	}
	p.Config = &rest.Config{
		Host:            p.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{CAFile: k.ClusterCA.CertFile, CertFile: admin.CertFile, KeyFile: admin.KeyFile},
		QPS:             200, Burst: 400,
		UserAgent: "capscale-e2e",
	}
	if p.Client, err = kubernetes.NewForConfig(p.Config); err != nil {
		return err
	}
	return p.waitUntil(ctx, proc, 90*time.Second, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		err := p.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		return err == nil, nil
	})
}

func (p *Plane) startControllerManager(ctx context.Context, port int) error {
	k := p.PKI
	client, err := k.ClusterCA.Issue(k.Dir, "kube-controller-manager", CertSpec{CommonName: "system:kube-controller-manager", Client: true})
	if err != nil {
		return err
	}
	kc, err := p.writeCertKubeconfig("kube-controller-manager", client)
	if err != nil {
		return err
	}
	serving, err := p.ServingCert("kube-controller-manager-serving", "localhost")
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + serving.CertFile, "--tls-private-key-file=" + serving.KeyFile,
		"--leader-elect=false", "--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + k.ServiceAccountKey,
		"--root-ca-file=" + k.ClusterCA.CertFile,
		"--cluster-signing-cert-file=" + k.ClusterCA.CertFile, "--cluster-signing-key-file=" + k.ClusterCA.KeyFile,
		"--horizontal-pod-autoscaler-sync-period=" + p.Opts.HPASyncPeriod.String(),
		"--profiling=false",
		// Its default, /usr/libexec/kubernetes/kubelet-plugins/volume/exec/,
		// is created on the host when missing.
		"--flex-volume-plugin-dir=" + filepath.Join(p.Dir, "flex-volume-plugins"),
	}
	if p.Opts.NodeLeaseDuration != defaultNodeLease {
		args = append(args, "--node-monitor-grace-period="+nodeGracePeriod(p.Opts.NodeLeaseDuration).String())
	}
	proc, err := p.StartProcess("kube-controller-manager", p.bin("kube-controller-manager"), append(args, p.Opts.ExtraControllerManagerFlags...)...)
	if err != nil {
		return err
	}
	return p.waitHTTP(ctx, proc, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), p.PKI.ClusterCA)
}

func (p *Plane) startScheduler(ctx context.Context, port int) error {
	k := p.PKI
	client, err := k.ClusterCA.Issue(k.Dir, "kube-scheduler", CertSpec{CommonName: "system:kube-scheduler", Client: true})
	if err != nil {
		return err
	}
	kc, err := p.writeCertKubeconfig("kube-scheduler", client)
	if err != nil {
		return err
	}
	serving, err := p.ServingCert("kube-scheduler-serving", "localhost")
	if err != nil {
		return err
	}
	cfg, err := schedulerConfig(p.Opts.SchedulerConfig, kc)
	if err != nil {
		return err
	}
	cfgFile := filepath.Join(p.Dir, "kube-scheduler.yaml")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		return err
	}
	args := []string{
		"--config=" + cfgFile,
		"--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + serving.CertFile, "--tls-private-key-file=" + serving.KeyFile,
		"--profiling=false",
	}
	proc, err := p.StartProcess("kube-scheduler", p.schedulerBin(), append(args, p.Opts.ExtraSchedulerFlags...)...)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.SchedulerURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	p.mu.Unlock()
	return p.waitHTTP(ctx, proc, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), p.PKI.ClusterCA)
}

// RunningSchedulerConfig is the configuration of the plane's running
// scheduler, false if none runs (a test stopped it).
func (p *Plane) RunningSchedulerConfig() (string, bool) {
	for _, proc := range p.Processes() {
		if exited, _ := proc.Exited(); proc.Name == "kube-scheduler" && !exited {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.Opts.SchedulerConfig, true
		}
	}
	return "", false
}

// RestartScheduler stops kube-scheduler and starts it again with config (a
// KubeSchedulerConfiguration in YAML), as an operator switching a running
// cluster's scheduler configuration would.
func (p *Plane) RestartScheduler(ctx context.Context, config string) error {
	for _, proc := range p.Processes() {
		if proc.Name == "kube-scheduler" {
			proc.Stop(5 * time.Second)
		}
	}
	p.mu.Lock()
	p.Opts.SchedulerConfig = config
	p.mu.Unlock()
	port, err := FreePort()
	if err != nil {
		return err
	}
	return p.startScheduler(ctx, port)
}

// RestartSchedulerWith is RestartScheduler with another scheduler binary
// (kube-scheduler or capscale-scheduler), as an operator switching a
// running cluster between scheduling modes would.
func (p *Plane) RestartSchedulerWith(ctx context.Context, binary, config string) error {
	p.mu.Lock()
	p.Opts.SchedulerBinary = binary
	p.mu.Unlock()
	return p.RestartScheduler(ctx, config)
}

// schedulerConfig points the given KubeSchedulerConfiguration at the
// scheduler's kubeconfig; with --config, kube-scheduler ignores the flags.
func schedulerConfig(in, kubeconfig string) ([]byte, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(in), &m); err != nil {
		return nil, fmt.Errorf("parsing scheduler config: %w", err)
	}
	if m == nil {
		return nil, errors.New("scheduler config is empty")
	}
	cc, _ := m["clientConnection"].(map[string]any)
	if cc == nil {
		cc = map[string]any{}
	}
	cc["kubeconfig"] = kubeconfig
	m["clientConnection"] = cc
	m["leaderElection"] = map[string]any{"leaderElect": false}
	return yaml.Marshal(m)
}

func (p *Plane) startKwok(port int) error {
	stages := filepath.Join(p.Opts.BinDir, "kwok-stages.yaml")
	if _, err := os.Stat(stages); err != nil {
		return fmt.Errorf("kwok stages missing (run `make control-plane`): %w", err)
	}
	_, err := p.StartProcess("kwok", p.bin("kwok"),
		"--kubeconfig="+p.Kubeconfig, "--config="+stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		fmt.Sprintf("--server-address=127.0.0.1:%d", port),
		"--node-ip=127.0.0.1", fmt.Sprintf("--node-lease-duration-seconds=%d", int(p.Opts.NodeLeaseDuration.Seconds())))
	return err
}

// ServingCert issues a serving certificate signed by the cluster CA for the
// given DNS names plus 127.0.0.1, so the cluster CA is a valid caBundle.
func (p *Plane) ServingCert(name string, dnsNames ...string) (CertPair, error) {
	return p.PKI.ClusterCA.Issue(p.PKI.Dir, name, CertSpec{
		CommonName: name, DNSNames: dnsNames, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true,
	})
}

// waitHTTP polls url until it answers 200, verifying TLS against ca if given.
func (p *Plane) waitHTTP(ctx context.Context, proc *Process, url string, ca *CA) error {
	c, err := httpClient(ca)
	if err != nil {
		return err
	}
	return p.waitUntil(ctx, proc, 60*time.Second, url, func(ctx context.Context) (bool, error) {
		req, err := newGet(ctx, url)
		if err != nil {
			return false, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
}

// waitUntil polls cond, failing early when proc has exited.
func (p *Plane) waitUntil(ctx context.Context, proc *Process, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if proc != nil {
			if exited, err := proc.Exited(); exited {
				return false, fmt.Errorf("%s exited: %v", proc.Name, err)
			}
		}
		return cond(ctx)
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

func (p *Plane) waitDefaultServiceAccount(ctx context.Context, ns string) error {
	return p.waitUntil(ctx, nil, 60*time.Second, "ServiceAccount "+ns+"/default", func(ctx context.Context) (bool, error) {
		_, err := p.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// WaitForNamespace creates ns and waits until pods can be created in it.
func (p *Plane) WaitForNamespace(ctx context.Context, ns string) error {
	_, err := p.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !isAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	return p.waitDefaultServiceAccount(ctx, ns)
}

// defaultNodeLease is the kubelet's Lease duration, the kwok nodes' default.
const defaultNodeLease = 40 * time.Second

// nodeGracePeriod is how long kube-controller-manager waits for a node's
// Lease renewal before marking it unknown: three renewals (a quarter of the
// lease each), never less than its default 50s.
func nodeGracePeriod(lease time.Duration) time.Duration {
	return max(50*time.Second, 3*lease/4)
}
