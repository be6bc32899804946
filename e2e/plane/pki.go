package plane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority whose files live on disk for the components.
type CA struct {
	Cert     *x509.Certificate
	Key      crypto.Signer
	CertFile string
	KeyFile  string
}

// CertPair is an issued certificate and its key on disk.
type CertPair struct {
	CertFile string
	KeyFile  string
}

// PKI is every certificate and key the plane needs.
type PKI struct {
	Dir        string
	ClusterCA  *CA
	FrontProxy *CA
	// ServiceAccountKey signs tokens; ServiceAccountPub verifies them.
	ServiceAccountKey, ServiceAccountPub string
	APIServer                            CertPair
	FrontProxyClient                     CertPair
}

func newPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	var err error
	if p.ClusterCA, err = NewCA(dir, "cluster-ca", "capscale-e2e-cluster-ca"); err != nil {
		return nil, err
	}
	if p.FrontProxy, err = NewCA(dir, "front-proxy-ca", "capscale-e2e-front-proxy-ca"); err != nil {
		return nil, err
	}
	if p.APIServer, err = p.ClusterCA.Issue(dir, "apiserver", CertSpec{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:        []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(kubernetesServiceIP)},
		Server:     true,
	}); err != nil {
		return nil, err
	}
	if p.FrontProxyClient, err = p.FrontProxy.Issue(dir, "front-proxy-client", CertSpec{
		CommonName: "front-proxy-client", Client: true,
	}); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p.ServiceAccountKey = filepath.Join(dir, "sa.key")
	p.ServiceAccountPub = filepath.Join(dir, "sa.pub")
	if err := writeKey(p.ServiceAccountKey, key); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.ServiceAccountPub, "PUBLIC KEY", pub); err != nil {
		return nil, err
	}
	return p, nil
}

// NewCA creates a CA named cn and writes FILE.crt and FILE.key in dir (the
// plane's CAs, and the test CAs of capscale's TLS clients and servers).
func NewCA(dir, file, cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating CA %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, Key: key, CertFile: filepath.Join(dir, file+".crt"), KeyFile: filepath.Join(dir, file+".key")}
	if err := writePEM(ca.CertFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, writeKey(ca.KeyFile, key)
}

// CertSpec describes a certificate to issue.
type CertSpec struct {
	CommonName    string
	Organizations []string
	DNSNames      []string
	IPs           []net.IP
	Server        bool
	Client        bool
}

// Issue signs a new key pair for spec and writes NAME.crt and NAME.key in dir.
func (ca *CA) Issue(dir, name string, spec CertSpec) (CertPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CertPair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organizations},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
	}
	if spec.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return CertPair{}, fmt.Errorf("issuing certificate %s: %w", name, err)
	}
	pair := CertPair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	if err := writePEM(pair.CertFile, "CERTIFICATE", der); err != nil {
		return CertPair{}, err
	}
	return pair, writeKey(pair.KeyFile, key)
}

// CAData returns the PEM of the CA certificate (an APIService caBundle).
func (ca *CA) CAData() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
