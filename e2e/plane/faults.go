package plane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// StartScheduler runs one more kube-scheduler process named name (its log
// is name.log) with config, a KubeSchedulerConfiguration in YAML, as the
// client of kubeconfig. Unlike the plane's own scheduler, config's
// leaderElection is kept as written: two such processes with the same lease
// are an HA pair.
func (p *Plane) StartScheduler(ctx context.Context, name, config, kubeconfig string) (*Process, error) {
	return p.StartSchedulerBinary(ctx, name, p.schedulerBin(), config, kubeconfig)
}

// StartSchedulerBinary is StartScheduler with the binary bin instead of the
// plane's scheduler binary: plugin mode's capscale-scheduler beside the
// plane's stock kube-scheduler.
func (p *Plane) StartSchedulerBinary(ctx context.Context, name, bin, config, kubeconfig string) (*Process, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(config), &m); err != nil || m == nil {
		return nil, fmt.Errorf("parsing scheduler config for %s: %v", name, err)
	}
	cc, _ := m["clientConnection"].(map[string]any)
	if cc == nil {
		cc = map[string]any{}
	}
	cc["kubeconfig"] = kubeconfig
	m["clientConnection"] = cc
	cfg, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(p.Dir, name+".yaml")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	serving, err := p.ServingCert(name+"-serving", "localhost")
	if err != nil {
		return nil, err
	}
	proc, err := p.StartProcess(name, bin,
		"--config="+cfgFile,
		"--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+serving.CertFile, "--tls-private-key-file="+serving.KeyFile,
		"--profiling=false")
	if err != nil {
		return nil, err
	}
	return proc, p.waitHTTP(ctx, proc, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), p.PKI.ClusterCA)
}

// Halt stops etcd or kube-apiserver (SIGTERM, SIGKILL after grace), for a
// fault test; Resume starts it again.
func (p *Plane) Halt(name string, grace time.Duration) error {
	proc, err := p.server(name)
	if err != nil {
		return err
	}
	proc.Stop(grace)
	return nil
}

// Resume starts etcd or kube-apiserver again after Halt with the same flags,
// so the same ports and etcd data directory, and waits until it serves
// (etcd /health, kube-apiserver /readyz).
func (p *Plane) Resume(ctx context.Context, name string) error {
	old, err := p.server(name)
	if err != nil {
		return err
	}
	if exited, _ := old.Exited(); !exited {
		return fmt.Errorf("%s is still running", name)
	}
	proc, err := p.StartProcess(name, p.bin(name), old.Args...)
	if err != nil {
		return err
	}
	if name == "etcd" {
		for _, a := range old.Args {
			if url, ok := strings.CutPrefix(a, "--listen-client-urls="); ok {
				return p.waitHTTP(ctx, proc, url+"/health", nil)
			}
		}
		return fmt.Errorf("etcd flags have no --listen-client-urls")
	}
	return p.waitUntil(ctx, proc, 90*time.Second, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		err := p.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		return err == nil, nil
	})
}

// server is the newest process of etcd or kube-apiserver.
func (p *Plane) server(name string) (*Process, error) {
	if name != "etcd" && name != "kube-apiserver" {
		return nil, fmt.Errorf("only etcd and kube-apiserver can be halted, not %q", name)
	}
	procs := p.Processes()
	for i := len(procs) - 1; i >= 0; i-- {
		if procs[i].Name == name {
			return procs[i], nil
		}
	}
	return nil, fmt.Errorf("%s is not part of the plane", name)
}

// KillScheduler ends the plane's scheduler with SIGKILL, as a crashed
// leader would end, and starts it again with the same binary and
// configuration.
func (p *Plane) KillScheduler(ctx context.Context) error {
	for _, proc := range p.Processes() {
		if proc.Name == "kube-scheduler" {
			proc.Kill()
		}
	}
	p.mu.Lock()
	config := p.Opts.SchedulerConfig
	p.mu.Unlock()
	return p.RestartScheduler(ctx, config)
}

// Scheduler is the plane's running scheduler process, if any.
func (p *Plane) Scheduler() *Process {
	var out *Process
	for _, proc := range p.Processes() {
		if exited, _ := proc.Exited(); proc.Name == "kube-scheduler" && !exited {
			out = proc
		}
	}
	return out
}
