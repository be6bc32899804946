package servingcert

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"k8s.io/client-go/util/keyutil"
)

// Keys of the Secret the Manager owns. tls.crt/tls.key is the standard
// kubernetes.io/tls pair; ca.crt the bundle clients trust (the current CA
// first, then older ones not yet expired); ca.key the current CA's key.
const (
	KeyCert     = "tls.crt"
	KeyKey      = "tls.key"
	KeyCABundle = "ca.crt"
	KeyCAKey    = "ca.key"
)

// backdate is how far NotBefore is set in the past, for clocks a little
// behind ours: 5 minutes, or a tenth of the lifetime if that is less, so
// that the renewal point (a third of NotBefore..NotAfter before the end)
// stays well after the issue time however short the lifetime.
func backdate(validity time.Duration) time.Duration { return min(5*time.Minute, validity/10) }

// pair is a parsed certificate with its key (nil for a CA only trusted).
type pair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// sign makes a P-256 key and a random serial for tmpl, then signs it with
// parent (itself when parent is empty: a self-signed CA).
func sign(tmpl *x509.Certificate, parent pair) (pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pair{}, err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)); err != nil {
		return pair{}, err
	}
	issuer, signer := tmpl, crypto.Signer(key)
	if parent.cert != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		return pair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return pair{}, err
	}
	return pair{cert: cert, key: key}, nil
}

// newCA makes a self-signed CA valid for validity from now.
func newCA(now time.Time, validity time.Duration, name string) (pair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s-ca@%d", name, now.Unix())},
		NotBefore:             now.Add(-backdate(validity)),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, pair{})
}

// newLeaf makes a serving certificate for dnsNames signed by ca.
func newLeaf(now time.Time, validity time.Duration, dnsNames []string, ca pair) (pair, error) {
	notAfter := now.Add(validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: dnsNames[0]},
		DNSNames:    slices.Clone(dnsNames),
		NotBefore:   now.Add(-backdate(validity)),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return sign(tmpl, ca)
}

func encodeCerts(certs ...*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseCerts reads every CERTIFICATE block of b.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

func parsePair(certPEM, keyPEM []byte) (pair, error) {
	certs, err := parseCerts(certPEM)
	if err != nil {
		return pair{}, err
	}
	k, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return pair{}, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return pair{}, errors.New("the private key cannot sign")
	}
	if !publicKeyEqual(certs[0].PublicKey, signer.Public()) {
		return pair{}, errors.New("the private key does not match the certificate")
	}
	return pair{cert: certs[0], key: signer}, nil
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

// fingerprint identifies a certificate in logs and sets.
func fingerprint(c *x509.Certificate) string {
	s := sha256.Sum256(c.Raw)
	return fmt.Sprintf("%x", s[:8])
}

// issuedBy reports whether leaf verifies against ca (signature and names).
func issuedBy(leaf, ca *x509.Certificate) bool {
	return bytes.Equal(leaf.RawIssuer, ca.RawSubject) && leaf.CheckSignatureFrom(ca) == nil
}

// renewAt is when a certificate should be replaced: with a third of its
// lifetime left, so a failure to renew has that long to be noticed.
func renewAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Add(-life / 3)
}
