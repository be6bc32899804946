package stack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/e2e/plane"
)

// KEDA's own operator and metrics server, built from its module at the
// version capscale requires (e2e/tools/keda, `make keda`), installed the way
// KEDA's config/ installs them: its CRDs and RBAC applied from the module,
// both processes running as the keda-operator ServiceAccount in namespace
// keda, the metrics server asking the operator over gRPC (mutual TLS with
// the certificates in their cert directories) and owning the
// external-metrics APIService.
type KEDA struct {
	// Operator is keda-operator; Adapter is keda-metrics-apiserver.
	Operator, Adapter *plane.Process
	// AdapterPort serves the external-metrics API on 127.0.0.1; GRPCAddr is
	// the operator's metrics service.
	AdapterPort int
	GRPCAddr    string
	// Dir is KEDA's module (its config/), CertDir the processes' ca.crt,
	// tls.crt and tls.key.
	Dir, CertDir string

	Opts KEDAOptions

	kubeconfig string
	starts     int
}

// KEDAOptions choose how KEDA runs.
type KEDAOptions struct {
	// CertRotation runs KEDA as its chart ships it: the operator makes its
	// own CA and certificates (Secret keda/kedaorg-certs, written to the
	// cert directory both processes read) and writes its CA into the
	// APIService's caBundle. Off: certificates of the cluster CA, no
	// rotation, the caBundle left alone.
	CertRotation bool
	// NoAPIServicePatching turns the operator's caBundle writes off
	// (--enable-apiservice-patching=false) while it still rotates its
	// certificates.
	NoAPIServicePatching bool
}

// KEDANamespace, KEDAMetricsService and KEDAOperatorService are the names
// KEDA's manifests use.
const (
	KEDANamespace       = "keda"
	KEDAMetricsService  = "keda-metrics-apiserver"
	KEDAOperatorService = "keda-operator"
)

// kedaModuleDir is KEDA's module in the module cache: the main module
// requires the same version the binaries are built from.
func kedaModuleDir(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/kedacore/keda/v2")
	cmd.Dir = plane.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding KEDA's module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// StartKEDA installs KEDA's CRDs and RBAC, starts its operator and metrics
// server from binDir (keda-operator, keda-adapter) and makes the metrics
// server the owner of v1beta1.external.metrics.k8s.io.
func (s *Stack) StartKEDA(ctx context.Context, binDir string, o KEDAOptions) (*KEDA, error) {
	dir, err := kedaModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.WaitForNamespace(ctx, KEDANamespace); err != nil {
		return nil, err
	}
	cfg := func(rel string) string { return filepath.Join(dir, "config", rel) }
	// Server-side: the ScaledJob CRD is too large for the annotation of a
	// client-side apply.
	for _, f := range []string{cfg("crd/bases"), cfg("service_account/service_account.yaml"), cfg("rbac/role.yaml"),
		cfg("rbac/role_binding.yaml"), cfg("metrics-server/role.yaml"), cfg("metrics-server/role_binding.yaml")} {
		if out, err := s.Kubectl(ctx, "apply", "--server-side", "-f", f); err != nil {
			return nil, fmt.Errorf("applying KEDA's %s: %w\n%s", f, err, out)
		}
	}
	if out, err := s.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/scaledobjects.keda.sh", "crd/triggerauthentications.keda.sh"); err != nil {
		return nil, fmt.Errorf("waiting for KEDA's CRDs: %w\n%s", err, out)
	}
	kc, err := s.ServiceAccountKubeconfig(ctx, KEDANamespace, "keda-operator")
	if err != nil {
		return nil, err
	}
	k := &KEDA{Dir: dir, kubeconfig: kc, CertDir: filepath.Join(s.PKI.Dir, "keda-certs"), Opts: o}
	if o.CertRotation {
		if err := os.MkdirAll(k.CertDir, 0o700); err != nil {
			return nil, err
		}
	} else if err := s.kedaCerts(k.CertDir); err != nil {
		return nil, err
	}
	grpcPort, err := plane.FreePort()
	if err != nil {
		return nil, err
	}
	k.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", grpcPort)
	if k.AdapterPort, err = plane.FreePort(); err != nil {
		return nil, err
	}
	if err := s.RestartKEDA(ctx, k, binDir); err != nil {
		return nil, err
	}
	if err := s.LocalService(ctx, KEDANamespace, KEDAMetricsService, k.AdapterPort); err != nil {
		return nil, err
	}
	return k, s.RouteAPIService(ctx, KEDANamespace, KEDAMetricsService)
}

// kedaCerts writes the cert directory both KEDA processes read: the
// cluster CA (ca.crt) and one key pair for the operator's gRPC server, the
// metrics server's gRPC client and its HTTPS serving (KEDA's own rotation
// also issues one certificate for all three).
func (s *Stack) kedaCerts(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var dns []string
	for _, svc := range []string{KEDAOperatorService, KEDAMetricsService} {
		dns = append(dns, svc, svc+"."+KEDANamespace, svc+"."+KEDANamespace+".svc", svc+"."+KEDANamespace+".svc.cluster.local")
	}
	pair, err := s.PKI.ClusterCA.Issue(dir, "keda", plane.CertSpec{CommonName: "keda-operator", DNSNames: dns,
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true, Client: true})
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(s.PKI.ClusterCA.CertFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		return err
	}
	if err := os.Rename(pair.CertFile, filepath.Join(dir, "tls.crt")); err != nil {
		return err
	}
	return os.Rename(pair.KeyFile, filepath.Join(dir, "tls.key"))
}

// RestartKEDA starts KEDA's operator and metrics server (again) and waits
// until both are ready.
func (s *Stack) RestartKEDA(ctx context.Context, k *KEDA, binDir string) error {
	k.starts++
	probe, err := plane.FreePort()
	if err != nil {
		return err
	}
	metrics, err := plane.FreePort()
	if err != nil {
		return err
	}
	// KEDA reads its namespaces from the environment (POD_NAMESPACE,
	// KEDA_CLUSTER_OBJECT_NAMESPACE); env(1) sets them and execs, so the
	// process is KEDA's own.
	env := []string{"KUBECONFIG=" + k.kubeconfig, "POD_NAMESPACE=" + KEDANamespace,
		"KEDA_CLUSTER_OBJECT_NAMESPACE=" + KEDANamespace, "WATCH_NAMESPACE="}
	opArgs := append(env, filepath.Join(binDir, "keda-operator"), "--leader-elect=false",
		fmt.Sprintf("--enable-cert-rotation=%t", k.Opts.CertRotation), "--enable-webhook-patching=false",
		fmt.Sprintf("--enable-apiservice-patching=%t", !k.Opts.NoAPIServicePatching),
		"--cert-dir="+k.CertDir, "--metrics-service-bind-address="+k.GRPCAddr,
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics), "--zap-log-level=info")
	// With rotation, the operator stores new certificates in its Secret and
	// exits for the kubelet to restart it with the Secret mounted at its
	// cert dir: here the test projects the Secret and starts it again.
	for attempt := 1; ; attempt++ {
		projected := false
		if k.Opts.CertRotation {
			if projected, err = s.projectKEDASecret(ctx, k.CertDir); err != nil {
				return err
			}
		}
		op, err := s.StartProcess(fmt.Sprintf("keda-operator-%d-%d", k.starts, attempt), "/usr/bin/env", opArgs...)
		if err != nil {
			return err
		}
		k.Operator = op
		err = s.waitReady(ctx, op, fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
		exited, _ := op.Exited()
		switch {
		case err != nil && (!exited || !k.Opts.CertRotation || attempt == 3):
			return err
		case err == nil && (!k.Opts.CertRotation || projected):
		case err == nil:
			// A first start: it makes the Secret, then exits.
			if err := waitExit(ctx, op, 60*time.Second); err != nil {
				return err
			}
			continue
		default:
			continue
		}
		break
	}
	if err := waitFiles(ctx, k.Operator, k.CertDir, "ca.crt", "tls.crt", "tls.key"); err != nil {
		return err
	}
	adapterMetrics, err := plane.FreePort()
	if err != nil {
		return err
	}
	ad, err := s.StartProcess(fmt.Sprintf("keda-adapter-%d", k.starts), "/usr/bin/env", append(env,
		filepath.Join(binDir, "keda-adapter"), fmt.Sprintf("--secure-port=%d", k.AdapterPort), "--bind-address=127.0.0.1",
		"--cert-dir="+k.CertDir, "--tls-cert-file="+filepath.Join(k.CertDir, "tls.crt"),
		"--tls-private-key-file="+filepath.Join(k.CertDir, "tls.key"),
		"--lister-kubeconfig="+k.kubeconfig, "--authentication-kubeconfig="+k.kubeconfig, "--authorization-kubeconfig="+k.kubeconfig,
		"--metrics-service-address="+k.GRPCAddr, fmt.Sprintf("--port=%d", adapterMetrics), "--zap-log-level=info",
		// KEDA's own certificates name its Services, not 127.0.0.1.
		"--metrics-service-grpc-authority="+KEDAOperatorService+"."+KEDANamespace+".svc.cluster.local")...)
	if err != nil {
		return err
	}
	k.Adapter = ad
	c, err := k.HTTPClient()
	if err != nil {
		return err
	}
	return waitReadyWith(ctx, ad, fmt.Sprintf("https://127.0.0.1:%d/readyz", k.AdapterPort), c)
}

// CA is the PEM of the CA KEDA's certificates come from (its own with
// CertRotation, else the cluster CA).
func (k *KEDA) CA() ([]byte, error) { return os.ReadFile(filepath.Join(k.CertDir, "ca.crt")) }

// HTTPClient trusts KEDA's CA only, and verifies the metrics server's
// Service name (KEDA's own certificates carry no IP address).
func (k *KEDA) HTTPClient() (*http.Client, error) {
	ca, err := k.CA()
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no certificate in %s/ca.crt", k.CertDir)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12,
			ServerName: KEDAMetricsService + "." + KEDANamespace + ".svc"}}}, nil
}

// projectKEDASecret writes the keys of KEDA's certificate Secret into dir,
// as the kubelet mounts it into KEDA's pods, and reports whether there
// were any (none before the operator's first start).
func (s *Stack) projectKEDASecret(ctx context.Context, dir string) (bool, error) {
	sec, err := s.Client.CoreV1().Secrets(KEDANamespace).Get(ctx, "kedaorg-certs", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading KEDA's certificate Secret: %w", err)
	}
	for key, data := range sec.Data {
		if err := os.WriteFile(filepath.Join(dir, key), data, 0o600); err != nil {
			return false, err
		}
	}
	return len(sec.Data) > 0, nil
}

// waitExit waits until proc has exited.
func waitExit(ctx context.Context, proc *plane.Process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if exited, _ := proc.Exited(); exited {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s made its certificate Secret but did not exit within %s\n%s", proc.Name, timeout, proc.Tail(20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitFiles waits until the operator has written every file into dir (its
// certificate rotation does so at start).
func waitFiles(ctx context.Context, proc *plane.Process, dir string, files ...string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		missing := ""
		for _, f := range files {
			if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
				missing = f
				break
			}
		}
		if missing == "" {
			return nil
		}
		if exited, err := proc.Exited(); exited {
			return fmt.Errorf("%s exited before writing %s: %v\n%s", proc.Name, missing, err, proc.Tail(40))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s wrote no %s in %s within 60s\n%s", proc.Name, missing, dir, proc.Tail(40))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
