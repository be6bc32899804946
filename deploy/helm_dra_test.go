package deploy

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestHelmDRAMode: extender.mode=dra renders deploy/dra's DeviceClass,
// RBAC rules and slice policy (for the ServiceAccount the chart's extender
// runs as), turns the device publisher on in the extender sidecar, and
// leaves out both policies that move pods to capscale-scheduler (the
// marked namespaces' and, with capacity sources, the draws-all one):
// default-scheduler counts the IP itself.
func TestHelmDRAMode(t *testing.T) {
	r, err := helmTemplate(t, "--set", "extender.mode=dra", "--set", "extender.releaseFinalizer=true", "--set", "controller.capacitySources.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"dra/deviceclass.yaml", "dra/rbac.yaml", "dra/slices-policy.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for key, w := range decodeRender(t, string(b)) {
			if strings.HasPrefix(key, "ClusterRoleBinding") || strings.HasPrefix(key, "RoleBinding") {
				continue // bound to the chart's own ServiceAccount
			}
			g, ok := r[key]
			if !ok {
				t.Errorf("the chart does not render %s of deploy/%s", key, f)
				continue
			}
			switch wt := w.typed.(type) {
			case *rbacv1.ClusterRole:
				if gr := g.typed.(*rbacv1.ClusterRole).Rules; !reflect.DeepEqual(wt.Rules, gr) {
					t.Errorf("%s: chart rules %+v, deploy/%s %+v", key, gr, f, wt.Rules)
				}
			case *rbacv1.Role:
				if gr := g.typed.(*rbacv1.Role).Rules; !reflect.DeepEqual(wt.Rules, gr) {
					t.Errorf("%s: chart rules %+v, deploy/%s %+v", key, gr, f, wt.Rules)
				}
			default:
				wantSpec, gotSpec := w.raw["spec"], g.raw["spec"]
				if strings.HasPrefix(key, "ValidatingAdmissionPolicy ") {
					// The chart's extender runs as capscale-scheduler.
					gotSpec = strings.ReplaceAll(toYAML(t, gotSpec), "capscale-system:capscale-scheduler", "capscale-system:capscale-extender")
					wantSpec = toYAML(t, wantSpec)
				}
				if !reflect.DeepEqual(wantSpec, gotSpec) {
					t.Errorf("%s: chart spec %v, deploy/%s %v", key, gotSpec, f, wantSpec)
				}
			}
		}
	}
	d := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
	c := container(t, d, "extender")
	if !slices.Contains(c.Command, "--publish-devices") || slices.Contains(c.Command, "--publish-capacity") {
		t.Errorf("extender command %v: want --publish-devices and not --publish-capacity", c.Command)
	}
	for _, p := range []string{"capscale-underlay-scheduler", "capscale-draws-all-scheduler"} {
		if _, ok := r[objectKey("MutatingAdmissionPolicy", "", p)]; ok {
			t.Errorf("DRA mode renders %s, which would move pods off default-scheduler", p)
		}
	}
	if _, ok := r[objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-ip")]; !ok {
		t.Error("DRA mode renders no capscale-underlay-ip: marked pods would get no request")
	}
}

// TestHelmDRAModeRefusedBelow137: below Kubernetes 1.37 the chart refuses
// DRA mode and says why, as docs/dra.md shows.
func TestHelmDRAModeRefusedBelow137(t *testing.T) {
	_, err := helmTemplate(t, "--kube-version", "1.36.5", "--set", "extender.mode=dra")
	if err == nil || !strings.Contains(err.Error(), "extender.mode=dra needs Kubernetes 1.37 or later, and this cluster is v1.36.5") {
		t.Errorf("helm template --kube-version 1.36.5 --set extender.mode=dra: %v, want the refusal", err)
	}
	if _, err := helmTemplate(t, "--set", "extender.mode=dra", "--set", "extender.publishCapacity=true"); err == nil {
		t.Error("extender.mode=dra with extender.publishCapacity renders; kube-scheduler would count Node status, not devices")
	}
}

// toYAML is v as YAML, for comparing after a textual substitution.
func toYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
