package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// Files serves a PEM pair read from files and read again when they change:
// a mounted Secret that a Manager (or cert-manager) rotates reaches the
// server without a restart. The workload API, the extender over HTTPS and
// the KEDA scaler serve from it when given --tls-cert-file.
type Files struct {
	content *dynamiccertificates.DynamicCertKeyPairContent

	mu     sync.Mutex
	pem    []byte
	parsed *tls.Certificate
}

// FromFiles reads the pair now, so that a bad file is a startup error.
func FromFiles(name, certFile, keyFile string) (*Files, error) {
	c, err := dynamiccertificates.NewDynamicServingContentFromFiles(name, certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate %s: %w", certFile, err)
	}
	f := &Files{content: c}
	if _, err := f.GetCertificate(nil); err != nil {
		return nil, err
	}
	return f, nil
}

// Run watches the files until ctx is done.
func (f *Files) Run(ctx context.Context) { f.content.Run(ctx, 1) }

// CurrentCertKeyContent is the PEM pair as last read.
func (f *Files) CurrentCertKeyContent() ([]byte, []byte) { return f.content.CurrentCertKeyContent() }

// GetCertificate is tls.Config.GetCertificate, parsing again only on change.
func (f *Files) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, key := f.content.CurrentCertKeyContent()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parsed != nil && bytes.Equal(cert, f.pem) {
		return f.parsed, nil
	}
	p, err := tlsCertificate(cert, key)
	if err != nil {
		return nil, fmt.Errorf("the serving certificate %s: %w", f.content.Name(), err)
	}
	f.pem, f.parsed = cert, p
	return p, nil
}
