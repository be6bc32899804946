package app

import (
	"crypto/x509"
	"testing"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// caContent is a CAContentProvider with fixed content.
type caContent []byte

func (c caContent) Name() string                   { return "test" }
func (c caContent) CurrentCABundleContent() []byte { return c }
func (c caContent) VerifyOptions() (x509.VerifyOptions, bool) {
	return x509.VerifyOptions{}, len(c) > 0
}
func (c caContent) AddListener(dynamiccertificates.Listener) {}

func TestClientCALoaded(t *testing.T) {
	tests := []struct {
		name string
		ca   dynamiccertificates.CAContentProvider
		ok   bool
	}{
		{"no client certificates verified", nil, true},
		{"not read from the ConfigMap yet", caContent(nil), false},
		{"loaded", caContent("-----BEGIN CERTIFICATE-----"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := clientCALoaded(tc.ca); (err == nil) != tc.ok {
				t.Errorf("clientCALoaded = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
