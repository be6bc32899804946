package stack

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
)

// SchedulerReplica is one replica of deploy/scheduler's capscale-scheduler
// Deployment: a kube-scheduler process and its own extender process, both
// as ServiceAccount capscale-scheduler, the scheduler calling only its
// extender.
type SchedulerReplica struct {
	Name        string
	Scheduler   *plane.Process
	Extender    *plane.Process
	ExtenderURL string
}

// Kill ends both processes with SIGKILL, as the loss of the pod's node would.
func (r *SchedulerReplica) Kill() {
	r.Scheduler.Kill()
	if r.Extender != nil {
		r.Extender.Kill()
	}
}

// StartPluginSchedulerReplica applies deploy/plugin/capscale-scheduler.yaml
// without its Deployment and starts one replica of plugin mode's
// capscale-scheduler named name, as ServiceAccount capscale-scheduler with
// that RBAC alone, leader election as the ConfigMap has it, and
// awaitCapacitySource where the stack has capacity sources (as
// deploy/capacity-sources and the chart set it). The binary is
// capscale-scheduler (SchedulerBinary if set) whatever the plane's own
// scheduler is: beside a stack not in plugin mode, the plane's stock
// kube-scheduler stays the cluster's default-scheduler.
func (s *Stack) StartPluginSchedulerReplica(ctx context.Context, name string) (*SchedulerReplica, error) {
	return s.StartPluginSchedulerReplicaVia(ctx, name, "")
}

// StartPluginSchedulerReplicaVia is StartPluginSchedulerReplica with its
// client pointed at server (a proxy in front of kube-apiserver) instead of
// kube-apiserver itself; "" for kube-apiserver.
func (s *Stack) StartPluginSchedulerReplicaVia(ctx context.Context, name, server string) (*SchedulerReplica, error) {
	file := DeployFile("plugin/capscale-scheduler.yaml")
	docs, config, err := schedulerManifests(file)
	if err != nil {
		return nil, err
	}
	if s.Opts.CapacitySources != "" && !s.Opts.NoAwaitCapacitySource {
		config = AwaitCapacitySource(config)
	}
	if err := s.profilesFree(config); err != nil {
		return nil, err
	}
	bin := filepath.Join(s.Opts.BinDir, "capscale-scheduler")
	if s.Opts.SchedulerBinary != "" {
		bin = s.Opts.SchedulerBinary
	}
	rbac := filepath.Join(s.Dir, "capscale-scheduler-plugin-rbac.yaml")
	if err := os.WriteFile(rbac, docs, 0o600); err != nil {
		return nil, err
	}
	if _, err := s.Kubectl(ctx, "apply", "-f", rbac); err != nil {
		return nil, err
	}
	kc, err := s.ServiceAccountKubeconfig(ctx, Namespace, "capscale-scheduler")
	if err != nil {
		return nil, err
	}
	if server != "" {
		if kc, err = viaServer(kc, server); err != nil {
			return nil, err
		}
	}
	r := &SchedulerReplica{Name: name}
	if r.Scheduler, err = s.StartSchedulerBinary(ctx, name, bin, config, kc); err != nil {
		return nil, err
	}
	return r, nil
}

// leaseAcquired is what kube-scheduler's leader election logs on winning.
var leaseAcquired = regexp.MustCompile(`(?i)successfully acquired lease`)

// Leads reports whether this replica's kube-scheduler has acquired the lease
// (it exits when it loses it, so acquiring once means leading while alive).
func (r *SchedulerReplica) Leads() bool {
	b, err := os.ReadFile(r.Scheduler.LogFile)
	return err == nil && leaseAcquired.Match(b)
}

// StartSchedulerReplica applies deploy/scheduler/capscale-scheduler.yaml
// without its Deployment (ServiceAccount, RBAC, ConfigMap) and starts one
// replica named name: its extender on a free port, then kube-scheduler with
// the ConfigMap's configuration pointed at that extender, leader election as
// written there.
func (s *Stack) StartSchedulerReplica(ctx context.Context, name string) (*SchedulerReplica, error) {
	return s.StartSchedulerReplicaWith(ctx, name)
}

// StartSchedulerReplicaWith is StartSchedulerReplica with extenderArgs after
// the stack's own ExtenderArgs (a later flag wins).
func (s *Stack) StartSchedulerReplicaWith(ctx context.Context, name string, extenderArgs ...string) (*SchedulerReplica, error) {
	file := DeployFile("scheduler/capscale-scheduler.yaml")
	docs, config, err := schedulerManifests(file)
	if err != nil {
		return nil, err
	}
	rbac := filepath.Join(s.Dir, "capscale-scheduler-rbac.yaml")
	if err := os.WriteFile(rbac, docs, 0o600); err != nil {
		return nil, err
	}
	// The extender's ClusterRole lives in deploy/extender/.
	for _, f := range []string{DeployFile("extender/rbac.yaml"), rbac} {
		if _, err := s.Kubectl(ctx, "apply", "-f", f); err != nil {
			return nil, err
		}
	}
	kc, err := s.ServiceAccountKubeconfig(ctx, Namespace, "capscale-scheduler")
	if err != nil {
		return nil, err
	}
	port, err := plane.FreePort()
	if err != nil {
		return nil, err
	}
	r := &SchedulerReplica{Name: name, ExtenderURL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	args := append([]string{fmt.Sprintf("--bind-address=127.0.0.1:%d", port), "--kubeconfig=" + kc, "--v=2"}, s.Opts.ExtenderArgs...)
	args = append(args, extenderArgs...)
	if r.Extender, err = s.StartProcess(name+"-extender", filepath.Join(s.Opts.BinDir, "extender"), args...); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, r.Extender, r.ExtenderURL+"/readyz"); err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(s.Dir, name+"-config-in.yaml")
	if err := os.WriteFile(cfgFile, []byte(config), 0o600); err != nil {
		return nil, err
	}
	cfg, err := SchedulerConfigWithExtender(cfgFile, r.ExtenderURL)
	if err != nil {
		return nil, err
	}
	if r.Scheduler, err = s.StartScheduler(ctx, name, cfg, kc); err != nil {
		return nil, err
	}
	return r, nil
}

// schedulerManifests splits the capscale-scheduler manifest into what an
// operator applies minus the Deployment (the test runs its containers as
// processes) and the ConfigMap's KubeSchedulerConfiguration.
func schedulerManifests(file string) (docs []byte, config string, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, "", err
	}
	var kept [][]byte
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, "", fmt.Errorf("parsing %s: %w", file, err)
		}
		switch head.Kind {
		case "Deployment":
			continue
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := yaml.Unmarshal(doc, &cm); err != nil {
				return nil, "", fmt.Errorf("parsing %s: %w", file, err)
			}
			config = cm.Data["config.yaml"]
		}
		kept = append(kept, doc)
	}
	if config == "" {
		return nil, "", fmt.Errorf("%s has no ConfigMap with config.yaml", file)
	}
	return bytes.Join(kept, []byte("\n---\n")), config, nil
}

// StartNativeSchedulerReplica starts one replica of native mode's
// scheduler: the cluster's own kube-scheduler with deploy/native's
// configuration, as system:kube-scheduler (native mode grants the scheduler
// nothing of capscale's), leader election on. Its profile is renamed
// capscale-scheduler and its Lease lives in capscale-system, so that the
// plane's own scheduler neither takes these pods nor contends for the Lease.
func (s *Stack) StartNativeSchedulerReplica(ctx context.Context, name string) (*SchedulerReplica, error) {
	if !s.Opts.Native {
		return nil, fmt.Errorf("StartNativeSchedulerReplica: the stack is not in native mode")
	}
	b, err := os.ReadFile(DeployFile("native/kube-scheduler-config.yaml"))
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("parsing deploy/native's scheduler configuration: %w", err)
	}
	profiles, _ := cfg["profiles"].([]any)
	if len(profiles) != 1 {
		return nil, fmt.Errorf("deploy/native's scheduler configuration has %d profiles, want 1", len(profiles))
	}
	profiles[0].(map[string]any)["schedulerName"] = "capscale-scheduler"
	// system:kube-scheduler may update only Leases named kube-scheduler.
	cfg["leaderElection"] = map[string]any{"leaderElect": true, "resourceName": "kube-scheduler", "resourceNamespace": Namespace}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.profilesFree(string(out)); err != nil {
		return nil, err
	}
	r := &SchedulerReplica{Name: name}
	if r.Scheduler, err = s.StartScheduler(ctx, name, string(out), filepath.Join(s.Dir, "kube-scheduler.kubeconfig")); err != nil {
		return nil, err
	}
	return r, nil
}

// profilesFree refuses a plugin or native replica a profile the plane's
// running scheduler serves too: two schedulers, each counting from its own
// cache, place the same pods onto the same free IPs. TestSchedulingFailover
// ran its plugin replicas beside a plane scheduler with the
// capscale-scheduler profile until CI saw a node over capacity (2026-12-01).
// Extender replicas may share one: the binder lease (issue 31) lets one
// extender bind.
func (s *Stack) profilesFree(config string) error {
	running, ok := s.Plane.RunningSchedulerConfig()
	if !ok {
		return nil
	}
	mine, err := profileNames(config)
	if err != nil {
		return err
	}
	theirs, err := profileNames(running)
	if err != nil {
		return fmt.Errorf("the plane's scheduler configuration: %w", err)
	}
	for _, name := range mine {
		if slices.Contains(theirs, name) {
			return fmt.Errorf("the plane's own scheduler serves profile %s too: two schedulers would count the same IPs", name)
		}
	}
	return nil
}

// profileNames are a KubeSchedulerConfiguration's profiles, as
// kube-scheduler defaults them: one default-scheduler if none is named.
func profileNames(config string) ([]string, error) {
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal([]byte(config), &cfg); err != nil {
		return nil, fmt.Errorf("parsing a scheduler configuration: %w", err)
	}
	if len(cfg.Profiles) == 0 {
		return []string{"default-scheduler"}, nil
	}
	var names []string
	for _, p := range cfg.Profiles {
		names = append(names, cmp.Or(p.SchedulerName, "default-scheduler"))
	}
	return names, nil
}
