package stack

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

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
