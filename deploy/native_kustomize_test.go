package deploy

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestNativeKustomize: deploy/ in extender mode with the component
// deploy/native is native mode as the chart renders it where it cannot see
// the cluster (helm template, so no release finalizer): every object equal
// field by field but for Helm's labels and the chart's checksums. Listed
// before capacity-sources, the extender still waits for the mirror (the
// component picks the extender by both modes' labels).
func TestNativeKustomize(t *testing.T) {
	want, err := kustomizeMode(t, "extender", "native")
	if err != nil {
		t.Fatal(err)
	}
	want.dropCRDs()
	// helm template leaves the APIService to the adapter (TestHelmRendersKustomize).
	delete(want, objectKey("APIService", "", "v1beta1.external.metrics.k8s.io"))
	got, err := helmTemplate(t, "--set", "extender.mode=native")
	if err != nil {
		t.Fatal(err)
	}
	compareToKustomize(t, want, got, "deploy/ with deploy/native")

	for _, order := range [][]string{{"capacity-sources", "native"}, {"native", "capacity-sources"}} {
		r, err := kustomizeMode(t, "extender", order...)
		if err != nil {
			t.Fatalf("%v: %v", order, err)
		}
		ext := container(t, get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler")), "extender")
		if !slices.Contains(ext.Command, "--await-capacity-source") || !slices.Contains(ext.Command, "--publish-capacity") {
			t.Errorf("%v: the extender %v, want it to publish and wait for the mirror", order, ext.Command)
		}
	}
}
