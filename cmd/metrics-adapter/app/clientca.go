package app

import (
	"errors"
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
// adapter before. nil ca: no client certificates are verified at all.
func clientCALoaded(ca dynamiccertificates.CAContentProvider) error {
	if ca == nil || len(ca.CurrentCABundleContent()) > 0 {
		return nil
	}
	return errors.New("the client CAs of kube-system/extension-apiserver-authentication are not loaded yet: the aggregator's requests would be anonymous")
}

// clientCACheck is clientCALoaded as a readyz check.
func clientCACheck(ca dynamiccertificates.CAContentProvider) healthz.HealthChecker {
	return healthz.NamedCheck("capscale-client-ca-loaded", func(*http.Request) error { return clientCALoaded(ca) })
}
