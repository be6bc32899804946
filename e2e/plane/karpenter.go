package plane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Karpenter with its KWOK cloud provider (sigs.k8s.io/karpenter's kwok/
// main package), built by `make karpenter` from e2e/tools/karpenter at the
// version pinned there. Its CRDs come from that module, its RBAC from the
// chart in that module (rendered by helm, the Deployment left out), and it
// runs as a process with its own ServiceAccount, NodeOverlay on.
//
// The nodes it launches are Node objects it creates itself (a KWOK
// "instance" is its Node), annotated kwok.x-k8s.io/node=fake
// (kwok/cloudprovider/cloudprovider.go, addKwokAnnotation): the plane's kwok
// manages exactly that annotation (startKwok), so they turn Ready and run
// their pods like the plane's own nodes.
const (
	// KarpenterNamespace holds Karpenter's ServiceAccount and Roles.
	KarpenterNamespace = "karpenter"
	// KarpenterRelease is the Helm release name its chart is rendered
	// with: its ServiceAccount, ClusterRoles and Roles are named after it.
	KarpenterRelease = "karpenter"
	// KarpenterFeatureGates turns NodeOverlay on (alpha, off by default in
	// pkg/operator/options/options.go).
	KarpenterFeatureGates = "NodeOverlay=true"
)

// karpenterChartRBAC are the chart templates applied: the ServiceAccount
// and its roles, not the Deployment, Service, PDB or ServiceMonitor.
var karpenterChartRBAC = []string{
	"templates/serviceaccount.yaml", "templates/clusterrole.yaml", "templates/clusterrole-kwok.yaml",
	"templates/aggregate-clusterrole.yaml", "templates/role.yaml", "templates/rolebinding.yaml",
}

// KarpenterModuleDir is Karpenter's module in the module cache, at the
// version e2e/tools/karpenter pins (the binary's).
func KarpenterModuleDir(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/karpenter")
	cmd.Dir = filepath.Join(RepoRoot(), "e2e", "tools", "karpenter")
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding Karpenter's module from e2e/tools/karpenter: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// StartKarpenter installs Karpenter's CRDs and RBAC and starts it from
// BinDir/karpenter (with helm from BinDir to render the chart's RBAC). It
// returns once Karpenter answers its readiness probe.
func (p *Plane) StartKarpenter(ctx context.Context) (*Process, error) {
	dir, err := KarpenterModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	for _, b := range []string{"karpenter", "helm"} {
		if _, err := os.Stat(p.bin(b)); err != nil {
			return nil, fmt.Errorf("%s missing (run `make karpenter deploy-tools`): %w", b, err)
		}
	}
	// Server-side: the NodePool CRD is too large for a client-side apply's
	// last-applied annotation.
	for _, f := range []string{"kwok/charts/crds", "kwok/apis/crds"} {
		if _, err := p.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(dir, f)); err != nil {
			return nil, fmt.Errorf("applying Karpenter's CRDs %s: %w", f, err)
		}
	}
	if _, err := p.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/nodepools.karpenter.sh", "crd/nodeclaims.karpenter.sh", "crd/nodeoverlays.karpenter.sh",
		"crd/kwoknodeclasses.karpenter.kwok.sh"); err != nil {
		return nil, err
	}
	if err := p.WaitForNamespace(ctx, KarpenterNamespace); err != nil {
		return nil, err
	}
	args := []string{"template", KarpenterRelease, filepath.Join(dir, "kwok", "charts"), "--namespace", KarpenterNamespace}
	for _, t := range karpenterChartRBAC {
		args = append(args, "--show-only", t)
	}
	rbac, err := exec.CommandContext(ctx, p.bin("helm"), args...).Output()
	if err != nil {
		return nil, fmt.Errorf("rendering Karpenter's chart RBAC: %w", err)
	}
	rbacFile := filepath.Join(p.Dir, "karpenter-rbac.yaml")
	if err := os.WriteFile(rbacFile, rbac, 0o600); err != nil {
		return nil, err
	}
	if _, err := p.Kubectl(ctx, "apply", "-f", rbacFile); err != nil {
		return nil, fmt.Errorf("applying Karpenter's chart RBAC: %w", err)
	}
	kc, err := p.ServiceAccountKubeconfig(ctx, KarpenterNamespace, KarpenterRelease)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	// Outside a pod: the kubeconfig instead of the in-cluster config, the
	// namespace the Downward API would give, one replica without leader
	// election. The batch windows are Karpenter's defaults (1s idle, 10s
	// max).
	env := []string{
		"KUBECONFIG=" + kc,
		"SYSTEM_NAMESPACE=" + KarpenterNamespace,
		"DISABLE_LEADER_ELECTION=true",
		"FEATURE_GATES=" + KarpenterFeatureGates,
		fmt.Sprintf("METRICS_PORT=%d", ports[0]),
		fmt.Sprintf("HEALTH_PROBE_PORT=%d", ports[1]),
		"KUBERNETES_MIN_VERSION=1.19.0-0",
		"LOG_LEVEL=debug",
	}
	proc, err := p.StartProcessEnv("karpenter", p.bin("karpenter"), env)
	if err != nil {
		return nil, err
	}
	if err := p.waitHTTP(ctx, proc, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]), nil); err != nil {
		return proc, err
	}
	p.Opts.Logf("Karpenter (kwok provider) ready, metrics on 127.0.0.1:%d", ports[0])
	return proc, nil
}

// WaitKarpenterNodeClass waits until the KWOKNodeClass name is Ready (its
// status controller sets the condition): Karpenter launches nothing for a
// NodePool whose class is not.
func (p *Plane) WaitKarpenterNodeClass(ctx context.Context, name string) error {
	_, err := p.Kubectl(ctx, "wait", "--for=condition=Ready", "--timeout=60s", "kwoknodeclass/"+name)
	return err
}
