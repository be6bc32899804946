package stack

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
)

// extenderTLS is the extender's own CA and its serving certificate.
type extenderTLS struct {
	dir     string
	ca      *plane.CA
	serving plane.CertPair
}

// newExtenderTLS issues a serving certificate for 127.0.0.1, where the
// extender listens beside kube-scheduler, from a new CA. It is made before
// the plane starts: kube-scheduler's configuration names the CA file.
func newExtenderTLS() (*extenderTLS, error) {
	dir, err := os.MkdirTemp("", "capscale-extender-tls-")
	if err != nil {
		return nil, err
	}
	ca, err := plane.NewCA(dir, "ca", "capscale-extender-ca")
	if err != nil {
		return nil, err
	}
	pair, err := ca.Issue(dir, "serving", plane.CertSpec{CommonName: "capscale-extender", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		return nil, err
	}
	return &extenderTLS{dir: dir, ca: ca, serving: pair}, nil
}

// withExtenderCA turns every extender of a KubeSchedulerConfiguration to
// HTTPS verified against caFile.
func withExtenderCA(config, caFile string) (string, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(config), &m); err != nil {
		return "", fmt.Errorf("parsing the scheduler configuration: %w", err)
	}
	exts, _ := m["extenders"].([]any)
	for _, e := range exts {
		if em, ok := e.(map[string]any); ok {
			em["enableHTTPS"] = true
			em["tlsConfig"] = map[string]any{"caFile": caFile}
		}
	}
	out, err := yaml.Marshal(m)
	return string(out), err
}

// ExtenderHTTPClient is a client for the extender's URL: the plane's
// HTTPClient, or one that verifies the extender's own CA with ExtenderHTTPS.
func (s *Stack) ExtenderHTTPClient() (*http.Client, error) {
	if s.extenderTLS == nil {
		return s.HTTPClient()
	}
	pem, err := os.ReadFile(s.extenderTLS.ca.CertFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}
