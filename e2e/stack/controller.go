package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/e2e/plane"
)

// ControllerReplica is one running capscale-controller process.
type ControllerReplica struct {
	*plane.Process
	// URL serves /healthz, /readyz and /metrics.
	URL string
}

// InstallCRDs applies deploy/crd/ and waits until the apiserver serves it.
func (s *Stack) InstallCRDs(ctx context.Context) error {
	if _, err := s.Kubectl(ctx, "apply", "--server-side", "-f", DeployFile("crd")); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		return err
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := crds.Get(ctx, "elasticwebs.capscale.io", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range conditionsOf(u.Object) {
			if c["type"] == string(apiextensionsv1.Established) && c["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

func conditionsOf(obj map[string]any) []map[string]any {
	st, _ := obj["status"].(map[string]any)
	raw, _ := st["conditions"].([]any)
	var out []map[string]any
	for _, c := range raw {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// StartController runs one capscale-controller replica named name (its log
// is name.log) as ServiceAccount capscale-controller with the RBAC from
// deploy/controller/, and waits for /readyz. Replicas share the Lease; the
// first one up leads. extra flags follow Options.ControllerArgs.
func (s *Stack) StartController(ctx context.Context, name string, extra ...string) (*ControllerReplica, error) {
	if s.controllerKC == "" {
		kc, err := s.componentKubeconfig(ctx, "controller/rbac.yaml", "capscale-controller")
		if err != nil {
			return nil, err
		}
		s.controllerKC = kc
	}
	port, err := plane.FreePort()
	if err != nil {
		return nil, err
	}
	r := &ControllerReplica{URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	args := append([]string{
		fmt.Sprintf("--bind-address=127.0.0.1:%d", port), "--kubeconfig=" + s.controllerKC, "--v=2",
	}, s.Opts.ControllerArgs...)
	if r.Process, err = s.StartProcess(name, filepath.Join(s.Opts.BinDir, "controller"), append(args, extra...)...); err != nil {
		return nil, err
	}
	return r, s.waitReady(ctx, r.Process, r.URL+"/readyz")
}

// capacitySources writes the sources file, applies the mirror's RBAC from
// deploy/capacity-sources/rbac.yaml (unless the publisher reads the
// sources: no mirror runs) and read access to each source's resource for
// whoever reads them (a Role in the namespace of a namespaced source, as
// the chart renders it), and returns the file's path.
func (s *Stack) capacitySources(ctx context.Context, file string) (string, error) {
	f, err := capacitysource.Decode([]byte(file))
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.Dir, "capacity-sources.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		return "", err
	}
	reader := "capscale-controller"
	if s.PublisherReadsSources() {
		reader = "capscale-extender"
	} else if _, err := s.Kubectl(ctx, "apply", "-f", DeployFile("capacity-sources/rbac.yaml")); err != nil {
		return "", err
	}
	var rbac strings.Builder
	scheduler := ""
	switch {
	case s.ExtenderReadsSources():
		scheduler = fmt.Sprintf(", {kind: ServiceAccount, name: capscale-extender, namespace: %s}", Namespace)
	case s.Opts.SchedulerReadsSources:
		// The plane's scheduler runs as kube-scheduler's own user.
		scheduler = ", {kind: User, name: \"system:kube-scheduler\", apiGroup: rbac.authorization.k8s.io}"
	}
	for i, src := range f.Sources {
		src, err := src.Expand()
		if err != nil {
			return "", err
		}
		// Its resource and its usedFrom's: one role each.
		for j, r := range src.Reads() {
			kind, ns := "ClusterRole", ""
			if r.Namespace != "" {
				kind, ns = "Role", "\n  namespace: "+r.Namespace
			}
			fmt.Fprintf(&rbac, `---
apiVersion: rbac.authorization.k8s.io/v1
kind: %[1]s
metadata:
  name: capscale-e2e:capacity-source-%[2]d-%[7]d%[3]s
rules:
- apiGroups: [%[4]q]
  resources: [%[5]s]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: %[1]sBinding
metadata:
  name: capscale-e2e:capacity-source-%[2]d-%[7]d%[3]s
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: %[1]s, name: "capscale-e2e:capacity-source-%[2]d-%[7]d"}
subjects: [{kind: ServiceAccount, name: %[9]s, namespace: %[6]s}%[8]s]
`, kind, i, ns, r.Resource.Group, r.Resource.Resource, Namespace, j, scheduler, reader)
		}
	}
	if rbac.Len() > 0 {
		rbacFile := filepath.Join(s.Dir, "capacity-sources-rbac.yaml")
		if err := os.WriteFile(rbacFile, []byte(rbac.String()), 0o600); err != nil {
			return "", err
		}
		if _, err := s.Kubectl(ctx, "apply", "-f", rbacFile); err != nil {
			return "", err
		}
	}
	return path, nil
}
