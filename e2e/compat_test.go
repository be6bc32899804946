//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/capscale/capscale/e2e/plane"
)

// TestCompatAdmissionAPIs records which version of MutatingAdmissionPolicy
// the plane's kube-apiserver serves with its default feature gates and
// runtime config, the API issue 43's chart uses: the compatibility matrix
// (make test-compat) reads the "compat:" line. It never fails on an older
// minor; it fails only if discovery fails.
func TestCompatAdmissionAPIs(t *testing.T) {
	p := startPlane(t, plane.Options{Nodes: 1})
	_ = testContext(t, time.Minute)
	served := admissionPolicyServed(p)
	v, err := p.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compat: MutatingAdmissionPolicy %s (kube-apiserver %s)", served, v.GitVersion)
}
