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
	loaded, empty := caContent("-----BEGIN CERTIFICATE-----"), caContent(nil)
	tests := []struct {
		name string
		cas  []dynamiccertificates.CAContentProvider
		ok   bool
	}{
		{"no client certificates verified", []dynamiccertificates.CAContentProvider{nil, nil}, true},
		{"not read from the ConfigMap yet", []dynamiccertificates.CAContentProvider{empty, empty}, false},
		{"loaded", []dynamiccertificates.CAContentProvider{loaded, loaded}, true},
		// The serving union is non-empty once the client-ca is read;
		// the aggregator is verified by the request-header CA alone.
		{"the client-ca read, the request-header CA not yet",
			[]dynamiccertificates.CAContentProvider{dynamiccertificates.NewUnionCAContentProvider(loaded, empty), empty}, false},
		{"no request-header CA configured", []dynamiccertificates.CAContentProvider{loaded, nil}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := clientCALoaded(tc.cas...); (err == nil) != tc.ok {
				t.Errorf("clientCALoaded = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
