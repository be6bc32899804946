package deploy

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// TestHelmCertManager: with tls.certManager the chart renders cert-manager's
// Certificate (and, without an issuerRef, a self-signed CA Issuer chain),
// names it in the APIService's cert-manager.io/inject-ca-from, and the
// adapter serves the mounted Secret without managing a certificate: no
// --serving-cert-* flag, no Secret permissions.
func TestHelmCertManager(t *testing.T) {
	r, err := helmTemplate(t, "--set", "tls.certManager.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{
		objectKey("Issuer", "capscale-system", "capscale-selfsigned"), objectKey("Certificate", "capscale-system", "capscale-ca"),
		objectKey("Issuer", "capscale-system", "capscale-ca"), objectKey("Certificate", "capscale-system", "capscale-serving-cert"),
	} {
		if _, ok := r[k]; !ok {
			t.Errorf("no %s; rendered %v", k, r.keys())
		}
	}
	cert := r[objectKey("Certificate", "capscale-system", "capscale-serving-cert")].raw["spec"].(map[string]any)
	if cert["secretName"] != "capscale-serving-cert" || len(cert["dnsNames"].([]any)) != 2 ||
		cert["issuerRef"].(map[string]any)["name"] != "capscale-ca" {
		t.Errorf("serving Certificate spec %v", cert)
	}
	as := get[*apiregv1.APIService](t, r, objectKey("APIService", "", "v1beta1.external.metrics.k8s.io"))
	if got := as.Annotations["cert-manager.io/inject-ca-from"]; got != "capscale-system/capscale-serving-cert" {
		t.Errorf("APIService inject-ca-from %q", got)
	}
	adapter := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-metrics-adapter"))
	c := container(t, adapter, "metrics-adapter")
	if !slices.Contains(c.Command, "--tls-cert-file=/etc/capscale/tls/tls.crt") || volume(adapter, "tls") == nil {
		t.Errorf("adapter does not serve the mounted Secret: %v", c.Command)
	}
	for _, arg := range c.Command {
		if strings.HasPrefix(arg, "--serving-cert") {
			t.Errorf("adapter manages a certificate beside cert-manager: %s", arg)
		}
	}
	if _, ok := r[objectKey("Role", "capscale-system", "capscale:metrics-adapter:serving-cert")]; ok {
		t.Errorf("the adapter may write Secrets although cert-manager issues the certificate")
	}

	// An issuer of the operator's: only the serving Certificate, from it.
	r, err = helmTemplate(t, "--set", "tls.certManager.enabled=true", "--set", "tls.certManager.issuerRef.name=corp-ca",
		"--set", "tls.certManager.issuerRef.kind=ClusterIssuer")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r[objectKey("Issuer", "capscale-system", "capscale-ca")]; ok {
		t.Errorf("a CA Issuer rendered beside issuerRef")
	}
	ref := r[objectKey("Certificate", "capscale-system", "capscale-serving-cert")].raw["spec"].(map[string]any)["issuerRef"].(map[string]any)
	if ref["name"] != "corp-ca" || ref["kind"] != "ClusterIssuer" {
		t.Errorf("issuerRef %v", ref)
	}
}
