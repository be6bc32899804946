package stack

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/capscale/capscale/e2e/plane"
)

// TestAdapter is custom-metrics-apiserver's test-adapter, run as another
// external-metrics server: the owner of the APIService that capscale
// delegates to. It serves my-external-metric (foo=bar: 42, foo=baz: 43) and
// other-external-metric (44), and binds :8080 for its write endpoint (fixed
// in its main; it only serves custom metrics there).
type TestAdapter struct {
	Namespace, Service string
	URL                string
	Port               int
	Proc               *plane.Process

	bin, kubeconfig string
	cert            plane.CertPair
	starts          int
}

// testAdapterRBAC is what an aggregated API server needs for delegated
// authentication and authorization, and for API priority and fairness.
const testAdapterRBAC = `apiVersion: v1
kind: ServiceAccount
metadata: {name: test-adapter, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e:test-adapter:auth-delegator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
subjects: [{kind: ServiceAccount, name: test-adapter, namespace: %[1]s}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: e2e:test-adapter:auth-reader, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects: [{kind: ServiceAccount, name: test-adapter, namespace: %[1]s}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e:test-adapter}
rules:
- apiGroups: [flowcontrol.apiserver.k8s.io]
  resources: [flowschemas, prioritylevelconfigurations]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e:test-adapter}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e:test-adapter}
subjects: [{kind: ServiceAccount, name: test-adapter, namespace: %[1]s}]
`

// TestAdapterRBAC is testAdapterRBAC for the ServiceAccount test-adapter
// of ns (a test that runs the test-adapter as a pod applies it).
func TestAdapterRBAC(ns string) string { return fmt.Sprintf(testAdapterRBAC, ns) }

// StartTestAdapter runs the test-adapter in bin as its own ServiceAccount in
// ns, behind the Service ns/service on 127.0.0.1, and makes it the owner of
// the external-metrics APIService.
func (s *Stack) StartTestAdapter(ctx context.Context, bin, ns, service string) (*TestAdapter, error) {
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", ":8080")
	if err != nil {
		return nil, fmt.Errorf("the test-adapter needs port 8080 (its write endpoint is fixed there): %w", err)
	}
	l.Close()
	rbac := filepath.Join(s.PKI.Dir, "test-adapter-rbac.yaml")
	if err := os.WriteFile(rbac, []byte(fmt.Sprintf(testAdapterRBAC, ns)), 0o600); err != nil {
		return nil, err
	}
	if _, err := s.Kubectl(ctx, "apply", "-f", rbac); err != nil {
		return nil, err
	}
	kc, err := s.ServiceAccountKubeconfig(ctx, ns, "test-adapter")
	if err != nil {
		return nil, err
	}
	port, err := plane.FreePort()
	if err != nil {
		return nil, err
	}
	cert, err := s.ServingCert("test-adapter", service+"."+ns+".svc")
	if err != nil {
		return nil, err
	}
	a := &TestAdapter{Namespace: ns, Service: service, Port: port, URL: fmt.Sprintf("https://127.0.0.1:%d", port),
		bin: bin, kubeconfig: kc, cert: cert}
	if err := s.RestartTestAdapter(ctx, a); err != nil {
		return nil, err
	}
	if err := s.LocalService(ctx, ns, service, port); err != nil {
		return nil, err
	}
	return a, s.RouteAPIService(ctx, ns, service)
}

// RestartTestAdapter starts a's process (again) on its port and waits until
// it is ready.
func (s *Stack) RestartTestAdapter(ctx context.Context, a *TestAdapter) error {
	a.starts++
	proc, err := s.StartProcess(fmt.Sprintf("test-adapter-%d", a.starts), a.bin,
		fmt.Sprintf("--secure-port=%d", a.Port), "--bind-address=127.0.0.1",
		"--tls-cert-file="+a.cert.CertFile, "--tls-private-key-file="+a.cert.KeyFile,
		"--lister-kubeconfig="+a.kubeconfig, "--authentication-kubeconfig="+a.kubeconfig, "--authorization-kubeconfig="+a.kubeconfig,
		// httplog logs every request's URI at 3: the delegate tests read it.
		"-v=3")
	if err != nil {
		return err
	}
	a.Proc = proc
	return s.waitReady(ctx, proc, a.URL+"/readyz")
}

// StartAdapter starts capscale's adapter after Start (for a stack started
// with Adapter false) and routes the APIService to it.
func (s *Stack) StartAdapter(ctx context.Context) error { return s.startAdapter(ctx) }

// TestAdapterBin is where the e2e suite and `make bench` put the test-adapter.
func TestAdapterBin(binDir string) string { return filepath.Join(binDir, "test-adapter") }
