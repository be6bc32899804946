package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// Serving is the certificate a TLS server presents. It is a
// dynamiccertificates.CertKeyContentProvider (and Notifier), which the
// generic API server takes as SecureServing.Cert, and its GetCertificate
// serves crypto/tls and gRPC servers.
type Serving struct {
	name string

	mu        sync.RWMutex
	cert, key []byte
	parsed    *tls.Certificate
	listeners []dynamiccertificates.Listener
	ready     chan struct{}
}

var _ dynamiccertificates.CertKeyContentProvider = (*Serving)(nil)
var _ dynamiccertificates.Notifier = (*Serving)(nil)

func newServing(name string) *Serving { return &Serving{name: name, ready: make(chan struct{})} }

// Name names the source in the API server's logs.
func (s *Serving) Name() string { return "secret/" + s.name }

// CurrentCertKeyContent is the PEM pair served now.
func (s *Serving) CurrentCertKeyContent() ([]byte, []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cert, s.key
}

// AddListener is told of every change.
func (s *Serving) AddListener(l dynamiccertificates.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, l)
}

// GetCertificate is tls.Config.GetCertificate.
func (s *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.parsed == nil {
		return nil, errors.New("no serving certificate yet")
	}
	return s.parsed, nil
}

// Wait blocks until a certificate is served, or ctx is done.
func (s *Serving) Wait(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Serving) has() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.parsed != nil
}

// set serves a new pair; it reports whether anything changed.
func (s *Serving) set(cert, key []byte) bool {
	parsed, err := tlsCertificate(cert, key)
	if err != nil {
		return false
	}
	s.mu.Lock()
	if bytes.Equal(cert, s.cert) && bytes.Equal(key, s.key) {
		s.mu.Unlock()
		return false
	}
	first := s.parsed == nil
	s.cert, s.key, s.parsed = bytes.Clone(cert), bytes.Clone(key), parsed
	listeners := append([]dynamiccertificates.Listener(nil), s.listeners...)
	s.mu.Unlock()
	if first {
		close(s.ready)
	}
	for _, l := range listeners {
		l.Enqueue()
	}
	return true
}
