package stack

import (
	"net"
	"net/http"
	"os"

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
	var pair plane.CertPair
	if err == nil {
		pair, err = ca.Issue(dir, "serving", plane.CertSpec{CommonName: "capscale-extender", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &extenderTLS{dir: dir, ca: ca, serving: pair}, nil
}

// caFile is the CA kube-scheduler verifies the extender with; "" without
// ExtenderHTTPS (t is nil).
func (t *extenderTLS) caFile() string {
	if t == nil {
		return ""
	}
	return t.ca.CertFile
}

// remove deletes the CA and the serving pair; nil does nothing.
func (t *extenderTLS) remove() {
	if t != nil {
		_ = os.RemoveAll(t.dir)
	}
}

// ExtenderHTTPClient is a client for the extender's URL: the plane's
// HTTPClient, or one that verifies the extender's own CA with ExtenderHTTPS.
func (s *Stack) ExtenderHTTPClient() (*http.Client, error) {
	if s.extenderTLS == nil {
		return s.HTTPClient()
	}
	return s.extenderTLS.ca.HTTPClient()
}
