package deploy

import (
	"os"
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestHelmNativeMode: extender.mode=native renders deploy/native's RBAC and
// scheduler profile, and turns the publisher on in the extender sidecar.
func TestHelmNativeMode(t *testing.T) {
	r, err := helmTemplate(t, "--set", "extender.mode=native")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("native/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := decodeRender(t, string(b))
	for _, key := range []string{objectKey("ClusterRole", "", "capscale:capacity-publisher"), objectKey("Role", "capscale-system", "capscale:capacity-publisher")} {
		if _, ok := want[key]; !ok {
			t.Fatalf("deploy/native/rbac.yaml lacks %s", key)
		}
		var wantRules, gotRules []rbacv1.PolicyRule
		switch w := want[key].typed.(type) {
		case *rbacv1.ClusterRole:
			wantRules, gotRules = w.Rules, get[*rbacv1.ClusterRole](t, r, key).Rules
		case *rbacv1.Role:
			wantRules, gotRules = w.Rules, get[*rbacv1.Role](t, r, key).Rules
		}
		if !reflect.DeepEqual(wantRules, gotRules) {
			t.Errorf("%s: chart rules %+v, deploy/native %+v", key, gotRules, wantRules)
		}
	}

	// The scheduler profile is deploy/native's, with the second scheduler's name.
	cm := get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config"))
	var got, native map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &got); err != nil {
		t.Fatal(err)
	}
	nb, err := os.ReadFile("native/kube-scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(nb, &native); err != nil {
		t.Fatal(err)
	}
	if _, ok := got["extenders"]; ok {
		t.Error("native mode's scheduler configuration still calls the extender")
	}
	gp := got["profiles"].([]any)[0].(map[string]any)
	np := native["profiles"].([]any)[0].(map[string]any)
	if !reflect.DeepEqual(gp["pluginConfig"], np["pluginConfig"]) {
		t.Errorf("chart pluginConfig %v, deploy/native %v", gp["pluginConfig"], np["pluginConfig"])
	}

	d := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
	if c := container(t, d, "extender"); !slices.Contains(c.Command, "--publish-capacity") {
		t.Errorf("extender command %v lacks --publish-capacity", c.Command)
	}

	// The policy that holds the publisher's Node writes to removing the
	// startup taint comes with the taint permission.
	vap := objectKey("ValidatingAdmissionPolicy", "", "capscale-publisher-node-writes")
	if _, ok := r[vap]; !ok {
		t.Errorf("native mode renders no %s beside the publisher's nodes patch", vap)
	}

	// The default (extender mode) renders none of it.
	def, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := def[objectKey("ClusterRole", "", "capscale:capacity-publisher")]; ok {
		t.Error("extender mode renders the publisher's ClusterRole")
	}
	if _, ok := def[vap]; ok {
		t.Error("extender mode renders the publisher's node-writes policy")
	}
}
