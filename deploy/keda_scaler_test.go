package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/diff"
)

// TestKEDAScalerDeploy: the KEDA scaler is off by default in deploy/ and
// the chart; the chart's metricsAdapter.kedaScaler renders the same adapter
// Deployment and Service as deploy/ with the metrics-adapter/keda-scaler
// component, plus the client-CA ConfigMap, and refuses to render without
// a client CA.
func TestKEDAScalerDeploy(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	deployment := objectKey("Deployment", "capscale-system", "capscale-metrics-adapter")
	service := objectKey("Service", "capscale-system", "capscale-metrics-adapter")

	off, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	if c := container(t, get[*appsv1.Deployment](t, off, deployment), "metrics-adapter"); slices.ContainsFunc(c.Command, func(a string) bool { return strings.HasPrefix(a, "--keda-scaler") }) {
		t.Errorf("the KEDA scaler is on by default: %v", c.Command)
	}

	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(repoRoot(t), "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	k := "resources:\n- " + rel + "\ncomponents:\n- " + filepath.Join(rel, "metrics-adapter", "keda-scaler") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	want := kustomize(t, dir)
	got, err := helmTemplate(t, "-f", writeValues(t, "metricsAdapter:\n  kedaScaler:\n    enabled: true\n    clientCA: |\n      "+strings.ReplaceAll(strings.TrimSpace(ca), "\n", "\n      ")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{deployment, service} {
		w, ok := want[key]
		if !ok {
			t.Fatalf("deploy/ with the component lacks %s", key)
		}
		if _, ok := got[key]; !ok {
			t.Fatalf("the chart lacks %s", key)
		}
		normalized := withoutHelmLabels(got[key].raw, labelsOf(w.raw))
		if !reflect.DeepEqual(normalized, w.raw) {
			t.Errorf("%s differs (- kustomize with the component, + helm with kedaScaler.enabled):\n%s", key, diff.Diff(w.raw, normalized))
		}
	}
	c := container(t, get[*appsv1.Deployment](t, want, deployment), "metrics-adapter")
	if !slices.Contains(c.Command, "--keda-scaler-bind-address=:9443") || !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "keda-scaler" && p.ContainerPort == 9443 }) {
		t.Errorf("the component's adapter: command %v, ports %v", c.Command, c.Ports)
	}
	svc := get[*corev1.Service](t, want, service)
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "keda-scaler" && p.Port == 9443 }) {
		t.Errorf("the Service has no keda-scaler port 9443: %v", svc.Spec.Ports)
	}
	cm := get[*corev1.ConfigMap](t, got, objectKey("ConfigMap", "capscale-system", "capscale-keda-scaler-client-ca"))
	if cm.Data["ca.crt"] != ca {
		t.Errorf("client CA ConfigMap holds %q, want the value's PEM", cm.Data["ca.crt"])
	}

	if _, err := helmTemplate(t, "--set", "metricsAdapter.kedaScaler.enabled=true"); err == nil || !strings.Contains(err.Error(), "metricsAdapter.kedaScaler.clientCA") {
		t.Errorf("enabled without a client CA: %v, want an error naming metricsAdapter.kedaScaler.clientCA", err)
	}
}
