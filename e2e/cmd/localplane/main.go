// Command localplane is what `make local-up` and `make local-down` run: it
// starts the local control plane (and capscale's components) detached, writes
// a kubeconfig and a sourceable env file, and later stops it all by pid.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// whereaboutsSources is capscale-controller's --capacity-sources with
// --ipam whereabouts: each real node's capacity read from the NodeSlicePool
// whereabouts' node-slice controller writes, as the chart's preset reads it.
const whereaboutsSources = `sources:
- name: whereabouts
  preset: whereabouts-node-slice
  nodeSelector: {matchLabels: {"` + plane.RealNodeLabel + `": "true"}}
`

// state is what `up` leaves behind for `down`.
type state struct {
	Dir   string    `json:"dir"`
	Procs []procRef `json:"processes"`
	// RealNodeFootprint records what the real nodes created on the host;
	// down cleans up from it before it stops the plane.
	RealNodeFootprint string `json:"realNodeFootprint,omitempty"`
}

// procRef names a started process; down signals it only while /proc says
// the pid still runs the same executable, so a reused pid is left alone.
type procRef struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	Exe  string `json:"exe"`
}

func (r procRef) alive() bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", r.Pid))
	return err == nil && strings.TrimSuffix(exe, " (deleted)") == r.Exe
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: localplane up|down|clean-real-nodes|load-source [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	case "load-source":
		err = serveLoadSource(os.Args[2:])
	case "clean-real-nodes":
		// After a run that could not clean up (a killed test binary):
		// every registered run's footprint, removed exactly.
		err = plane.CleanRealNodes()
	default:
		err = fmt.Errorf("unknown command %q (want up, down or clean-real-nodes)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localplane:", err)
		os.Exit(1)
	}
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	out := fs.String("dir", "_output/local", "directory for kubeconfig, env, logs and state")
	bin := fs.String("bin-dir", "_output/bin", "directory with the control-plane and capscale binaries")
	nodes := fs.Int("nodes", 5, "number of kwok nodes")
	adapterConfig := fs.String("adapter-config", "", "metrics adapter config file; empty: a demo config polling a local load source")
	mode := fs.String("mode", "plugin", "scheduling mode: extender, native, plugin or dra (docs/choosing-a-mode.md, docs/dra.md)")
	realNodes := fs.Int("real-nodes", 0, "number of real nodes (kubelet, containerd, CNI bridge; needs root and make deps)")
	serviceNetwork := fs.Bool("service-network", false, "give the real nodes' pods Services and the apiserver: kube-proxy (nftables, its own tables) and the Service kubernetes (docs/development.md)")
	realCapacity := fs.Int("real-node-capacity", plane.DefaultRealNodeCapacity, "pod IPs of each real node: its IPAM range and its capscale.io/underlay-ip-capacity label (1..253)")
	publish := fs.Bool("publish-capacity", false, "extender mode: the extender publishes each node's capacity in its status too, as the chart's extender.publishCapacity does, so that an autoscaler sees it (docs/growing-the-cluster.md)")
	ipam := fs.String("ipam", plane.IPAMHostLocal, "the real nodes' IPAM: host-local, or whereabouts (node slices; --real-node-capacity 2, 6, 14, 30, 62 or 126), whose NodeSlicePool capscale-controller reads as a capacity source (the whereabouts-node-slice preset)")
	chart := fs.Bool("chart", false, "a cluster to install the Helm chart into, not capscale started: real nodes only (real-node-0 the system node), the service network, a local OCI registry the nodes pull from, a load index (docs/getting-started.md); --nodes, --mode and --adapter-config do not apply")
	chartVersion := fs.String("chart-version", "", "with --chart: the chart version make local-up pushes, written to the env file as CHART_VERSION")
	karpenter := fs.Bool("karpenter", false, "start Karpenter with its KWOK cloud provider and apply deploy/examples/karpenter/ (make karpenter deploy-tools; docs/growing-the-cluster.md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *realNodes < 0 || *realCapacity < 1 || *realCapacity > 253 {
		return fmt.Errorf("--real-nodes must be at least 0 and --real-node-capacity 1..253, got %d and %d", *realNodes, *realCapacity)
	}
	switch *mode {
	case "extender", "native", "plugin", "dra":
	default:
		return fmt.Errorf("--mode must be extender, native, plugin or dra, got %q", *mode)
	}
	if *publish && *mode != "extender" {
		return fmt.Errorf("--publish-capacity is extender mode's (native mode always publishes; plugin mode has no publisher), got --mode %s", *mode)
	}
	if *nodes < 1 {
		return fmt.Errorf("--nodes must be at least 1, got %d", *nodes)
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	binDir, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	if *adapterConfig != "" {
		if *adapterConfig, err = filepath.Abs(*adapterConfig); err != nil {
			return err
		}
		if _, err := os.Stat(*adapterConfig); err != nil {
			return fmt.Errorf("adapter config: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state.json")); err == nil {
		return fmt.Errorf("a local plane already runs from %s: run `make local-down` first", dir)
	}
	if err := os.RemoveAll(filepath.Join(dir, "plane")); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var sources string
	switch *ipam {
	case plane.IPAMHostLocal:
	case plane.IPAMWhereabouts:
		if *realNodes == 0 || *chart {
			return fmt.Errorf("--ipam whereabouts needs real nodes (--real-nodes) and no --chart (whereabouts runs without the service network here)")
		}
		sources = whereaboutsSources
	default:
		return fmt.Errorf("--ipam must be %s or %s, got %q", plane.IPAMHostLocal, plane.IPAMWhereabouts, *ipam)
	}
	if *chart {
		if *karpenter || *publish || *adapterConfig != "" {
			return fmt.Errorf("--chart starts no capscale component: --karpenter, --publish-capacity and --adapter-config do not apply")
		}
		return upChart(ctx, chartOptions{
			dir: dir, binDir: binDir, realNodes: *realNodes, cap: *realCapacity, chartVersion: *chartVersion,
			logf:           func(f string, a ...any) { fmt.Printf("  "+f+"\n", a...) },
			registryBinary: filepath.Join(binDir, "oci"), initialLoadSource: 0.1,
		})
	}
	start := time.Now()
	env := map[string]string{"KUBECONFIG": filepath.Join(dir, "kubeconfig")}
	logf := func(f string, a ...any) { fmt.Printf("  "+f+"\n", a...) }
	s, err := stack.Start(ctx, stack.Options{
		Plane: plane.Options{
			Dir: filepath.Join(dir, "plane"), BinDir: binDir, Nodes: *nodes, Detach: true, Logf: logf,
			RealNodes: *realNodes, RealNodeCapacity: *realCapacity, ServiceNetwork: *serviceNetwork,
			Karpenter: *karpenter, IPAM: *ipam,
			// Short enough for the demo to show the HPA acting; the default is 15s.
			HPASyncPeriod: 5 * time.Second,
		},
		BinDir:   binDir,
		Extender: *mode == "extender", Native: *mode == "native", Plugin: *mode == "plugin", DRA: *mode == "dra",
		PublishCapacity: *publish,
		Adapter:         true, WorkloadAPI: true, Controller: true,
		CapacitySources: sources,
		AdapterConfig:   *adapterConfig,
		Prepare: func(ctx context.Context, s *stack.Stack) error {
			if *mode == "plugin" {
				logf("starting capscale (plugin mode: the plane's scheduler is capscale-scheduler): metrics adapter, workload API, controller")
			} else {
				logf("starting capscale (%s mode%s): extender, metrics adapter, workload API, controller", *mode,
					map[bool]string{true: ", the extender publishing capacity"}[*publish])
			}
			// What the chart installs by default: pods of a namespace
			// labelled capscale.io/underlay=true are marked, and the
			// controller's Node writes held to its annotations.
			if err := s.ApplyDefaultPolicies(ctx); err != nil {
				return err
			}
			if *karpenter {
				// A NodePool (startup taint, capacity label) and the
				// NodeOverlay of its IP budget, for Karpenter to grow the
				// plane with (docs/growing-the-cluster.md).
				if _, err := s.Kubectl(ctx, "apply", "-f", filepath.Join(plane.RepoRoot(), "deploy", "examples", "karpenter")); err != nil {
					return err
				}
			}
			if *adapterConfig != "" {
				return nil
			}
			url, cfg, err := startLoadSource(s, binDir)
			if err != nil {
				return err
			}
			env["LOAD_SOURCE_URL"] = url
			s.Opts.AdapterConfig = cfg
			return nil
		},
	})
	if err != nil {
		return err
	}
	st := state{Dir: dir, RealNodeFootprint: s.RealNodeFootprint()}
	for _, proc := range s.Processes() {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", proc.Pid()))
		st.Procs = append(st.Procs, procRef{Name: proc.Name, Pid: proc.Pid(), Exe: exe})
	}
	env["MODE"] = *mode
	if s.ExtenderURL != "" {
		env["EXTENDER_URL"] = s.ExtenderURL
	}
	env["ADAPTER_URL"] = s.AdapterURL
	env["WORKLOAD_API_URL"] = s.WorkloadAPIURL
	env["CAPSCALE_CA_FILE"] = s.PKI.ClusterCA.CertFile
	if len(s.RealNodes) > 0 {
		var names []string
		for _, n := range s.RealNodes {
			names = append(names, n.Name)
		}
		// Any test or person can start pods there: nodeSelector
		// e2e.capscale.io/real-node=true, this image, imagePullPolicy: Never.
		env["REAL_NODES"] = strings.Join(names, " ")
		env["REAL_NODE_IMAGE"] = plane.RealNodeImage
		env["REAL_NODE_CAPACITY"] = fmt.Sprint(*realCapacity)
		env["IPAM"] = *ipam
	}
	if err := finishUp(s.Plane, dir, st, env); err != nil {
		s.Stop()
		return err
	}
	fmt.Printf("local plane up in %.1fs with %d nodes and %d real nodes; logs in %s\n", time.Since(start).Seconds(), *nodes, *realNodes, filepath.Join(dir, "plane", "logs"))
	return nil
}

func finishUp(p *plane.Plane, dir string, st state, env map[string]string) error {
	kc, err := os.ReadFile(p.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(env["KUBECONFIG"], kc, 0o600); err != nil {
		return err
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%q\n", k, env[k])
	}
	if err := os.WriteFile(filepath.Join(dir, "env"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "state.json"), js, 0o644)
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	out := fs.String("dir", "_output/local", "directory `up` used")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		fmt.Println("no local plane is running")
		return nil
	}
	if err != nil {
		return err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("reading %s: %w", filepath.Join(dir, "state.json"), err)
	}
	// Real nodes first: their kubelets, containerd and containers, mounts,
	// cgroups, bridges and files, exactly as recorded.
	if st.RealNodeFootprint != "" {
		if err := plane.CleanRealNodeFootprint(st.RealNodeFootprint); err != nil {
			return fmt.Errorf("cleaning up the real nodes (state kept; run down again): %w", err)
		}
		fmt.Println("real nodes removed from the host")
	}
	// Clients first, then the apiserver, then etcd.
	order := func(name string) int {
		switch name {
		case "kube-apiserver":
			return 1
		case "etcd":
			return 2
		}
		return 0
	}
	for phase := 0; phase <= 2; phase++ {
		for _, r := range st.Procs {
			if order(r.Name) == phase && r.alive() {
				plane.StopPid(r.Pid, 3*time.Second)
			}
		}
	}
	for _, f := range []string{"state.json", "env", "kubeconfig"} {
		os.Remove(filepath.Join(dir, f))
	}
	fmt.Printf("local plane stopped; logs kept in %s\n", filepath.Join(dir, "plane", "logs"))
	return nil
}
