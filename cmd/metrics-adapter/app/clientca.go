package app

import (
	"fmt"
	"net/http"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/healthz"
)

// clientCALoaded fails until the CAs the server verifies client
// certificates with are loaded. k8s.io/apiserver (v0.37.2,
// pkg/server/secure_serving.go) starts serving before its informers have
// read them from kube-system/extension-apiserver-authentication; until
// then the aggregator's proxy certificate is not verified, its requests
// (its availability probe among them) are anonymous and get 403, and the
// aggregator marks the APIService unavailable: an HPA reading an external
// metric then fails a sync ("the server is currently unable to handle the
// request"). Ready only once they are, so that no Service routes to the
// adapter before.
//
// Each CA is checked on its own: the client-ca and the request-header CA
// (the one the aggregator's proxy certificate is verified by) are read by
// two controllers (pkg/server/options/authentication.go:357-409), and the
// serving info's union of them is non-empty as soon as either is loaded.
// TestSoakShort saw an adapter, restarted, go ready by the union alone
// with the cluster CA loaded and not the front-proxy CA; while the TLS
// server names only the cluster CA as acceptable, Go's TLS client sends
// no certificate, and the aggregator's probe got 403 as anonymous. A nil
// ca verifies no client certificates; it is skipped.
func clientCALoaded(cas ...dynamiccertificates.CAContentProvider) error {
	for _, ca := range cas {
		if ca != nil && len(ca.CurrentCABundleContent()) == 0 {
			return fmt.Errorf("the client CA %q of kube-system/extension-apiserver-authentication is not loaded yet: the aggregator's requests would be anonymous", ca.Name())
		}
	}
	return nil
}

// clientCACheck is clientCALoaded as a readyz check.
func clientCACheck(cas ...dynamiccertificates.CAContentProvider) healthz.HealthChecker {
	return healthz.NamedCheck("capscale-client-ca-loaded", func(*http.Request) error { return clientCALoaded(cas...) })
}
