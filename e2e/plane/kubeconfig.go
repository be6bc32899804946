package plane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

func (p *Plane) writeKubeconfig(name string, auth *clientcmdapi.AuthInfo) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["capscale-e2e"] = &clientcmdapi.Cluster{Server: p.APIServerURL, CertificateAuthority: p.PKI.ClusterCA.CertFile}
	cfg.AuthInfos[name] = auth
	cfg.Contexts["capscale-e2e"] = &clientcmdapi.Context{Cluster: "capscale-e2e", AuthInfo: name}
	cfg.CurrentContext = "capscale-e2e"
	path := filepath.Join(p.Dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return path, nil
}

func (p *Plane) writeCertKubeconfig(name string, pair CertPair) (string, error) {
	return p.writeKubeconfig(name, &clientcmdapi.AuthInfo{ClientCertificate: pair.CertFile, ClientKey: pair.KeyFile})
}

// ServiceAccountToken creates the ServiceAccount ns/name if needed and returns
// a bound token for it, valid for a day.
func (p *Plane) ServiceAccountToken(ctx context.Context, ns, name string) (string, error) {
	_, err := p.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating ServiceAccount %s/%s: %w", ns, name, err)
	}
	tr, err := p.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating token for %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount ns/name, so a component runs with exactly its RBAC.
func (p *Plane) ServiceAccountKubeconfig(ctx context.Context, ns, name string) (string, error) {
	token, err := p.ServiceAccountToken(ctx, ns, name)
	if err != nil {
		return "", err
	}
	return p.writeKubeconfig("sa-"+ns+"-"+name, &clientcmdapi.AuthInfo{Token: token})
}

// Kubectl runs the plane's kubectl as admin and returns its combined output.
func (p *Plane) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, p.bin("kubectl"), append([]string{"--kubeconfig=" + p.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w: %s", args, err, out)
	}
	return string(out), nil
}

// HTTPClient returns a client that trusts the cluster CA (capscale's servers
// in the plane use ServingCert).
func (p *Plane) HTTPClient() (*http.Client, error) { return httpClient(p.PKI.ClusterCA) }

// HTTPClient returns a client that trusts ca only.
func (ca *CA) HTTPClient() (*http.Client, error) { return httpClient(ca) }

func httpClient(ca *CA) (*http.Client, error) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	if ca != nil {
		pool := x509.NewCertPool()
		pem, err := os.ReadFile(ca.CertFile)
		if err != nil {
			return nil, err
		}
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig.RootCAs = pool
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, nil
}

func newGet(ctx context.Context, url string) (*http.Request, error) {
	return http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
