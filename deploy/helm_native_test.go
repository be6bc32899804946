package deploy

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestHelmNativeMode: extender.mode=native renders deploy/native's RBAC,
// scheduler profile and (with extender.releaseFinalizer) release finalizer
// policies, and turns the publisher on in the extender sidecar.
func TestHelmNativeMode(t *testing.T) {
	r, err := helmTemplate(t, "--set", "extender.mode=native", "--set", "extender.releaseFinalizer=true")
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

	// The release finalizer's policies are deploy/native/release.yaml's,
	// spec for spec.
	rb, err := os.ReadFile("native/release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	release := decodeRender(t, string(rb))
	if len(release) != 4 {
		t.Fatalf("deploy/native/release.yaml holds %d objects, want the two policies and their bindings", len(release))
	}
	for key, want := range release {
		got, ok := r[key]
		if !ok {
			t.Errorf("native mode does not render %s", key)
			continue
		}
		if !reflect.DeepEqual(got.raw["spec"], want.raw["spec"]) {
			t.Errorf("%s: chart spec %v, deploy/native %v", key, got.raw["spec"], want.raw["spec"])
		}
	}

	// The policy that holds the publisher's Node writes to removing the
	// startup taint comes with the taint permission.
	vap := objectKey("ValidatingAdmissionPolicy", "", "capscale-publisher-node-writes")
	if _, ok := r[vap]; !ok {
		t.Errorf("native mode renders no %s beside the publisher's nodes patch", vap)
	}

	// The default (plugin mode) renders none of it.
	def, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{objectKey("ClusterRole", "", "capscale:capacity-publisher"), objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-ip-release")} {
		if _, ok := def[key]; ok {
			t.Errorf("the default mode renders %s", key)
		}
	}
	if _, ok := def[vap]; ok {
		t.Error("the default mode renders the publisher's node-writes policy")
	}
}

// TestHelmReleaseFinalizerOptIn: native mode's release finalizer stays out
// of a default native install (while no publisher runs it would hold every
// deleted pod, so `helm uninstall` would leave namespaces Terminating), and
// so does the publisher's pods patch; asked for outside native mode, the
// render fails saying why.
func TestHelmReleaseFinalizerOptIn(t *testing.T) {
	r, err := helmTemplate(t, "--set", "extender.mode=native")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-ip-release"), objectKey("ValidatingAdmissionPolicy", "", "capscale-extender-pod-writes")} {
		if _, ok := r[key]; ok {
			t.Errorf("a default native install renders %s", key)
		}
	}
	for _, rule := range get[*rbacv1.ClusterRole](t, r, objectKey("ClusterRole", "", "capscale:capacity-publisher")).Rules {
		if slices.Contains(rule.Resources, "pods") {
			t.Errorf("a default native install lets the publisher %v pods", rule.Verbs)
		}
	}
	for _, mode := range []string{"extender", "plugin"} {
		_, err := helmTemplate(t, "--set", "extender.mode="+mode, "--set", "extender.releaseFinalizer=true")
		if err == nil || !strings.Contains(err.Error(), "extender.releaseFinalizer is native mode's") {
			t.Errorf("%s mode with extender.releaseFinalizer: err %v, want the render to refuse", mode, err)
		}
	}
}
