// Package stack runs capscale's components as real processes on a local
// control plane (package plane), wired the way an operator would wire them:
// the extender in kube-scheduler's configuration, the metrics adapter behind
// the external-metrics APIService, and the workload API beside it. Each
// component authenticates as its own ServiceAccount with the RBAC from
// deploy/, so a missing permission fails the tests that use it.
package stack

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
)

// Namespace is where capscale's ServiceAccounts live.
const Namespace = "capscale-system"

// Options choose which components run and how.
type Options struct {
	Plane plane.Options
	// BinDir holds capscale's binaries (make build); default <repo>/_output/bin.
	BinDir string

	Extender     bool
	ExtenderArgs []string
	// ExtenderBinary replaces BinDir/extender (benche2e's null extender).
	ExtenderBinary string
	// SchedulerBinary replaces BinDir/capscale-scheduler in plugin mode
	// (benche2e's scheduler with the null plugin).
	SchedulerBinary string
	// ExtenderHTTPS serves the extender over TLS with a certificate for
	// 127.0.0.1 from a CA of its own, which kube-scheduler verifies
	// (enableHTTPS, tlsConfig.caFile): its client then speaks HTTP/2 and
	// multiplexes every call on one connection.
	ExtenderHTTPS bool
	// Native runs native mode: the extender binary publishes capacity
	// (--publish-capacity, with deploy/native/rbac.yaml, and with real
	// nodes deploy/native/release.yaml's finalizer) and kube-scheduler
	// counts the resource itself (deploy/native/kube-scheduler-config.yaml
	// unless SchedulerConfigFile says otherwise). Implies Extender and
	// PublishCapacity.
	Native bool
	// DRA runs DRA mode: the extender binary publishes each node's IPs as
	// devices (--publish-devices, with deploy/dra/'s RBAC, slice policy and
	// DeviceClass, and with real nodes or ReleaseFinalizer
	// deploy/native/release.yaml's finalizer), and the plane's stock
	// kube-scheduler allocates them, scoring them as in native mode
	// (deploy/native/kube-scheduler-config.yaml unless SchedulerConfigFile
	// says otherwise). Implies Extender.
	DRA bool
	// DRASkipNodeOperations turns DRAOptionalNodeOperations (alpha) on in
	// kube-apiserver, kube-scheduler and the real nodes' kubelets, and
	// the publisher marks the slices of nodes that declare it
	// (--skip-node-operations): real nodes run pods with underlay IPs
	// without a kubelet plugin. Needs DRA.
	DRASkipNodeOperations bool
	// PublishCapacity runs native mode's publisher in the extender
	// (--publish-capacity, deploy/native/rbac.yaml and node-taint.yaml):
	// in extender mode, beside the rule, as the chart's
	// extender.publishCapacity does. Needs Extender.
	PublishCapacity bool
	// ReleaseFinalizer applies deploy/native/release.yaml's finalizer in
	// native mode on kwok nodes too (real nodes always have it): for a
	// test that ends its deleted pods itself, as their kubelet would.
	ReleaseFinalizer bool
	// Plugin runs plugin mode: the plane's scheduler is capscale-scheduler
	// (BinDir/capscale-scheduler: kube-scheduler with the UnderlayIP
	// plugin) with deploy/plugin/kube-scheduler-config.yaml unless
	// SchedulerConfigFile says otherwise; no extender runs.
	Plugin bool
	// SchedulerConfigFile is the KubeSchedulerConfiguration with the
	// extender; default deploy/scheduler/kube-scheduler-config.yaml.
	SchedulerConfigFile string
	// ExtenderAPIServer, if set (by Prepare at the latest), is the address
	// the extender reaches kube-apiserver through: a test's proxy that can
	// hold back what the extender sees, serving a certificate of the
	// cluster CA (Plane.ServingCert), since client-go sends credentials
	// only over TLS.
	ExtenderAPIServer string

	Adapter       bool
	AdapterConfig string
	AdapterArgs   []string
	// AdapterReplicas runs this many adapter processes behind the
	// APIService's Service (default 1); see replicas.go.
	AdapterReplicas int
	// AdapterManagedCert runs the adapter as the chart does: it makes its
	// own serving certificate in the Secret capscale-serving-cert and
	// writes the APIService's caBundle, which is registered without one
	// (AdapterArgs may shorten --serving-cert-*-validity).
	AdapterManagedCert bool

	WorkloadAPI  bool
	WorkloadArgs []string

	// Controller installs the CRDs and runs one capscale-controller
	// replica (more with StartController).
	Controller     bool
	ControllerArgs []string
	// CapacitySources, when set, is the --capacity-sources file of
	// capscale-controller (implies Controller): the stack applies
	// deploy/capacity-sources/rbac.yaml and read access to each source's
	// resource, as the chart renders it. Install the sources' CRDs in
	// Prepare: the controller is ready once their informers synced.
	CapacitySources string
	// NoAwaitCapacitySource leaves out what deploy/capacity-sources and
	// the chart set with capacity sources: --await-capacity-source on the
	// extender, awaitCapacitySource in the plugin's args (a test shows
	// the window at the default without them).
	NoAwaitCapacitySource bool
	// SchedulerReadsSources (plugin mode, with CapacitySources): the
	// plugin reads the sources itself (its capacitySources arg, the
	// file CapacitySources), and the plane's scheduler, as
	// system:kube-scheduler, may read each source's resource. In
	// extender mode the extender reads them (--capacity-sources, as
	// capscale-extender); capscale-controller mirrors them in both.
	SchedulerReadsSources bool
	// NativeMirror (native mode, with CapacitySources awaited): the
	// controller mirrors the sources onto the Nodes and the publisher
	// follows its annotations, as the chart's publisherReads: false
	// renders it. Without it, as the chart's default: the publisher reads
	// the sources itself (--capacity-sources) and writes the mirror's
	// annotations, and capscale-controller does not mirror (it runs only
	// if Controller asks for it).
	NativeMirror bool

	// Prepare runs after the plane is up and before capscale's components
	// start: the place to start a load source or write the adapter config.
	Prepare func(ctx context.Context, s *Stack) error
}

// Stack is a running plane with capscale's components.
type Stack struct {
	*plane.Plane
	Opts Options

	ExtenderURL, AdapterURL, WorkloadAPIURL string
	// Adapter and AdapterURL are Adapters[0]'s.
	Extender, Adapter, WorkloadAPI *plane.Process
	Adapters                       []*AdapterReplica
	Controller                     *ControllerReplica

	extenderPort int
	extenderKC   string
	// workloadArgs start the workload API again; workloadStarts names each
	// restart's log.
	workloadArgs   []string
	workloadStarts int
	// extenderTLS is the extender's CA and serving pair with ExtenderHTTPS.
	extenderTLS *extenderTLS
	// sourcesDir holds the sources file the plugin reads with
	// SchedulerReadsSources, written before the plane (and its scheduler)
	// starts; Stop removes it.
	sourcesDir   string
	controllerKC string
	// stopProbes ends the adapter endpoint prober (replicas.go), if any.
	stopProbes context.CancelFunc
}

// Start brings up the plane and the chosen components, each ready to serve.
func Start(ctx context.Context, o Options) (s *Stack, err error) {
	if o.BinDir == "" {
		o.BinDir = filepath.Join(plane.RepoRoot(), "_output", "bin")
	}
	s = &Stack{}
	if o.Native {
		o.Extender, o.PublishCapacity = true, true
	}
	if o.DRA {
		if o.Native || o.PublishCapacity {
			return nil, fmt.Errorf("stack: DRA mode publishes devices, not Node capacity")
		}
		o.Extender = true
		o.ExtenderArgs = append([]string{"--publish-devices", "--leader-elect-namespace=" + Namespace}, o.ExtenderArgs...)
		if o.DRASkipNodeOperations {
			const gate = "--feature-gates=DRAOptionalNodeOperations=true"
			o.ExtenderArgs = append(o.ExtenderArgs, "--skip-node-operations")
			o.Plane.ExtraAPIServerFlags = append(o.Plane.ExtraAPIServerFlags, gate)
			o.Plane.ExtraSchedulerFlags = append(o.Plane.ExtraSchedulerFlags, gate)
			o.Plane.KubeletFeatureGates = map[string]bool{"DRAOptionalNodeOperations": true}
		}
	}
	if o.PublishCapacity {
		if !o.Extender {
			return nil, fmt.Errorf("stack: PublishCapacity runs in the extender, and no extender runs")
		}
		o.ExtenderArgs = append([]string{"--publish-capacity", "--leader-elect-namespace=" + Namespace}, o.ExtenderArgs...)
	}
	await := o.CapacitySources != "" && !o.NoAwaitCapacitySource
	if o.NativeMirror && (!o.Native || !await) {
		return nil, fmt.Errorf("stack: NativeMirror needs native mode and CapacitySources, awaited")
	}
	if await && o.Extender {
		o.ExtenderArgs = append([]string{"--await-capacity-source"}, o.ExtenderArgs...)
	}
	if o.SchedulerReadsSources && (!await || o.Native || o.DRA || !o.Extender && !o.Plugin) {
		return nil, fmt.Errorf("stack: SchedulerReadsSources needs CapacitySources, awaited, in plugin or extender mode")
	}
	if o.Extender {
		if s.extenderPort, err = plane.FreePort(); err != nil {
			return nil, err
		}
		s.ExtenderURL = fmt.Sprintf("http://127.0.0.1:%d", s.extenderPort)
		if o.ExtenderHTTPS {
			if s.extenderTLS, err = newExtenderTLS(); err != nil {
				return nil, err
			}
			s.ExtenderURL = fmt.Sprintf("https://127.0.0.1:%d", s.extenderPort)
		}
		file := o.SchedulerConfigFile
		switch {
		case file == "" && (o.Native || o.DRA):
			file = DeployFile("native/kube-scheduler-config.yaml")
		case file == "":
			file = DeployFile("scheduler/kube-scheduler-config.yaml")
		}
		if o.Plane.SchedulerConfig, err = schedulerConfig(file, s.ExtenderURL, s.extenderTLS.caFile()); err != nil {
			s.extenderTLS.remove()
			return nil, err
		}
	}
	if o.Plugin {
		if o.Extender || o.Native {
			return nil, fmt.Errorf("stack: plugin mode runs no extender")
		}
		file := o.SchedulerConfigFile
		if file == "" {
			file = DeployFile("plugin/kube-scheduler-config.yaml")
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		o.Plane.SchedulerConfig = string(b)
		if await {
			o.Plane.SchedulerConfig = AwaitCapacitySource(o.Plane.SchedulerConfig)
		}
		if o.SchedulerReadsSources {
			if !await {
				return nil, fmt.Errorf("stack: SchedulerReadsSources needs CapacitySources, awaited")
			}
			if s.sourcesDir, err = os.MkdirTemp("", "capscale-sources-"); err != nil {
				return nil, err
			}
			path := filepath.Join(s.sourcesDir, "capacity-sources.yaml")
			if err := os.WriteFile(path, []byte(o.CapacitySources), 0o600); err != nil {
				_ = os.RemoveAll(s.sourcesDir)
				return nil, err
			}
			o.Plane.SchedulerConfig = ReadCapacitySources(o.Plane.SchedulerConfig, path)
		}
		o.Plane.SchedulerBinary = filepath.Join(o.BinDir, "capscale-scheduler")
		if o.SchedulerBinary != "" {
			o.Plane.SchedulerBinary = o.SchedulerBinary
		}
	}
	s.Opts = o
	if s.Plane, err = plane.Start(ctx, o.Plane); err != nil {
		s.extenderTLS.remove()
		if s.sourcesDir != "" {
			_ = os.RemoveAll(s.sourcesDir)
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, s.LogTails(40))
			s.Stop()
		}
	}()
	if _, err = s.Kubectl(ctx, "apply", "-f", DeployFile("namespace.yaml")); err != nil {
		return s, err
	}
	if o.Prepare != nil {
		if err = o.Prepare(ctx, s); err != nil {
			return s, err
		}
	}
	if o.CapacitySources != "" {
		path, err := s.capacitySources(ctx, o.CapacitySources)
		if err != nil {
			return s, err
		}
		if s.PublisherReadsSources() || s.ExtenderReadsSources() {
			o.ExtenderArgs = append(o.ExtenderArgs, "--capacity-sources="+path)
		}
		if !s.PublisherReadsSources() {
			o.Controller = true
			o.ControllerArgs = append(o.ControllerArgs, "--capacity-sources="+path)
		}
		s.Opts = o
	}
	if o.Extender {
		if err = s.startExtender(ctx); err != nil {
			return s, err
		}
	}
	if o.Adapter {
		if err = s.startAdapter(ctx); err != nil {
			return s, err
		}
	}
	if o.WorkloadAPI {
		if err = s.startWorkloadAPI(ctx); err != nil {
			return s, err
		}
	}
	if o.Controller {
		if err = s.InstallCRDs(ctx); err != nil {
			return s, err
		}
		if s.Controller, err = s.StartController(ctx, "controller"); err != nil {
			return s, err
		}
	}
	return s, nil
}

// PublisherReadsSources reports whether native mode's publisher reads the
// capacity sources itself (see Options.NativeMirror).
func (s *Stack) PublisherReadsSources() bool {
	o := s.Opts
	return o.Native && o.CapacitySources != "" && !o.NoAwaitCapacitySource && !o.NativeMirror
}

// ExtenderReadsSources reports whether extender mode's extender reads the
// capacity sources itself (Options.SchedulerReadsSources; Start refuses it
// outside plugin and extender modes and without the awaited sources).
func (s *Stack) ExtenderReadsSources() bool {
	return s.Opts.SchedulerReadsSources && !s.Opts.Plugin
}

// DeployFile is the path of a file under deploy/.
func DeployFile(rel string) string { return filepath.Join(plane.RepoRoot(), "deploy", rel) }

// SchedulerConfigWithExtender reads a KubeSchedulerConfiguration and points
// every extender (if any: native mode has none) at url, leaving the rest as
// written.
func SchedulerConfigWithExtender(file, url string) (string, error) {
	return schedulerConfig(file, url, "")
}

// schedulerConfig is SchedulerConfigWithExtender; with caFile, every
// extender is reached over HTTPS verified against it.
func schedulerConfig(file, url, caFile string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("parsing %s: %w", file, err)
	}
	exts, _ := m["extenders"].([]any)
	for _, e := range exts {
		if em, ok := e.(map[string]any); ok {
			em["urlPrefix"] = url
			if caFile != "" {
				em["enableHTTPS"] = true
				em["tlsConfig"] = map[string]any{"caFile": caFile}
			}
		}
	}
	out, err := yaml.Marshal(m)
	return string(out), err
}

// componentKubeconfig applies the component's RBAC from deploy/ and returns a
// kubeconfig for its ServiceAccount.
func (s *Stack) componentKubeconfig(ctx context.Context, rbacFile, serviceAccount string) (string, error) {
	if _, err := s.Kubectl(ctx, "apply", "-f", DeployFile(rbacFile)); err != nil {
		return "", err
	}
	return s.ServiceAccountKubeconfig(ctx, Namespace, serviceAccount)
}

func (s *Stack) startExtender(ctx context.Context) error {
	kc, err := s.componentKubeconfig(ctx, "extender/rbac.yaml", "capscale-extender")
	if err != nil {
		return err
	}
	if s.Opts.PublishCapacity {
		// The publisher's RBAC, and the policy that holds its Node writes
		// to removing the startup taint.
		for _, f := range []string{"native/rbac.yaml", "native/node-taint.yaml"} {
			if _, err := s.Kubectl(ctx, "apply", "-f", DeployFile(f)); err != nil {
				return err
			}
		}
	}
	if s.Opts.DRA {
		for _, f := range []string{"dra/rbac.yaml", "dra/slices-policy.yaml", "dra/deviceclass.yaml"} {
			if out, err := s.Kubectl(ctx, "apply", "-f", DeployFile(f)); err != nil {
				return fmt.Errorf("applying %s: %w\n%s", f, err, out)
			}
		}
	}
	if s.Opts.Native || s.Opts.DRA {
		// The release finalizer, as the chart installs it in native mode,
		// where a kubelet ends the pods: kwok's stages delete a pod
		// without the terminal phase a kubelet writes first, so on a kwok
		// node it would hold a deleted pod for underlay.MaxReleaseWait.
		if s.Opts.Plane.RealNodes > 0 || s.Opts.ReleaseFinalizer {
			if out, err := s.Kubectl(ctx, "apply", "-f", DeployFile("native/release.yaml")); err != nil {
				return fmt.Errorf("applying native/release.yaml: %w\n%s", err, out)
			}
			if err := s.waitReleasePolicy(ctx); err != nil {
				return err
			}
		}
	}
	if s.Opts.ExtenderAPIServer != "" {
		if kc, err = viaServer(kc, s.Opts.ExtenderAPIServer); err != nil {
			return err
		}
	}
	s.extenderKC = kc
	return s.StartExtender(ctx)
}

// StartExtender (re)starts the extender process on its fixed port and waits
// for /readyz, which turns ready once its ledger is rebuilt from the pods.
func (s *Stack) StartExtender(ctx context.Context) error {
	args := append([]string{
		fmt.Sprintf("--bind-address=127.0.0.1:%d", s.extenderPort),
		"--kubeconfig=" + s.extenderKC, "--v=2",
	}, s.Opts.ExtenderArgs...)
	if t := s.extenderTLS; t != nil {
		args = append(args, "--tls-cert-file="+t.serving.CertFile, "--tls-private-key-file="+t.serving.KeyFile)
	}
	bin := s.Opts.ExtenderBinary
	if bin == "" {
		bin = filepath.Join(s.Opts.BinDir, "extender")
	}
	proc, err := s.StartProcess("extender", bin, args...)
	if err != nil {
		return err
	}
	s.Extender = proc
	return s.waitReady(ctx, proc, s.ExtenderURL+"/readyz")
}

// KillExtender ends the extender with SIGKILL, as a crash would.
func (s *Stack) KillExtender() { s.Extender.Kill() }

func (s *Stack) waitReady(ctx context.Context, proc *plane.Process, url string) error {
	c, err := s.HTTPClient()
	if err == nil && proc == s.Extender {
		c, err = s.ExtenderHTTPClient()
	}
	if err == nil && strings.HasPrefix(proc.Name, "metrics-adapter") {
		c = s.adapterProbeClient(c)
	}
	if err != nil {
		return err
	}
	return waitReadyWith(ctx, proc, url, c)
}

// waitReadyWith polls url with c until it answers 200, for 60s at most.
func waitReadyWith(ctx context.Context, proc *plane.Process, url string, c *http.Client) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if exited, err := proc.Exited(); exited {
			return fmt.Errorf("%s exited before ready: %v\n%s", proc.Name, err, proc.Tail(40))
		}
		req, err := newGet(ctx, url)
		if err != nil {
			return err
		}
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after 60s\n%s", proc.Name, url, proc.Tail(40))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// viaServer writes a copy of kubeconfig kc whose clusters are reached at
// server and returns its path.
func viaServer(kc, server string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		return "", fmt.Errorf("reading kubeconfig %s: %w", kc, err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	out := strings.TrimSuffix(kc, ".kubeconfig") + "-via-proxy.kubeconfig"
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		return "", fmt.Errorf("writing kubeconfig %s: %w", out, err)
	}
	return out, nil
}

// adapterProbeClient is the client that probes the adapter's /readyz: c,
// or with AdapterManagedCert one that does not verify, as the kubelet
// probes (the adapter's CA is its own, made at start; the aggregator
// verifies it).
func (s *Stack) adapterProbeClient(c *http.Client) *http.Client {
	if !s.Opts.AdapterManagedCert {
		return c
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

// ReadCapacitySources adds capacitySources: path beside every
// awaitCapacitySource: true of a KubeSchedulerConfiguration (after
// AwaitCapacitySource).
func ReadCapacitySources(config, path string) string {
	return regexp.MustCompile(`(?m)^(\s*)(awaitCapacitySource: true)$`).ReplaceAllString(config, "${1}${2}\n${1}capacitySources: "+path)
}

// AwaitCapacitySource adds awaitCapacitySource: true beside every
// UnderlayIP defaultCapacity of a KubeSchedulerConfiguration, as the chart
// renders it with capacity sources on.
func AwaitCapacitySource(config string) string {
	return regexp.MustCompile(`(?m)^(\s*)(defaultCapacity: \d+)$`).ReplaceAllString(config, "${1}${2}\n${1}awaitCapacitySource: true")
}
