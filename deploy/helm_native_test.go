package deploy

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
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

// TestHelmReleaseFinalizerAuto: native mode's release finalizer is on by
// default (auto) only where its uninstall hook renders too, which a render
// that cannot see the cluster (helm template, Argo CD) never does: there a
// default native install has neither the policies nor the publisher's pods
// patch, while the pods it would leave Terminating after an uninstall have
// nobody to strip them. Asked for (true) it renders without the hook, for
// deploy/native/release-cleanup.yaml to strip them; outside native mode,
// or where the policy kind is not served, auto renders it off and true
// fails saying why. (e2e TestHelmReleaseCleanup: helm install, which sees
// the cluster, turns it on with its hook.)
func TestHelmReleaseFinalizerAuto(t *testing.T) {
	b, err := os.ReadFile(chartDir(t) + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Extender struct{ ReleaseFinalizer any }
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	if values.Extender.ReleaseFinalizer != "auto" {
		t.Errorf("extender.releaseFinalizer defaults to %v, want auto", values.Extender.ReleaseFinalizer)
	}
	policies := []string{objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-ip-release"), objectKey("ValidatingAdmissionPolicy", "", "capscale-extender-pod-writes")}
	hook := []string{objectKey("Job", "capscale-system", "capscale-release-cleanup"), objectKey("ClusterRole", "", "capscale:release-cleanup"),
		objectKey("ServiceAccount", "capscale-system", "capscale-release-cleanup")}
	podsPatch := func(r rendered) bool {
		for _, rule := range get[*rbacv1.ClusterRole](t, r, objectKey("ClusterRole", "", "capscale:capacity-publisher")).Rules {
			if slices.Contains(rule.Resources, "pods") {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name string
		args []string
		on   bool
		err  string
	}{
		{name: "native, blind render: off", args: []string{"--set", "extender.mode=native"}},
		{name: "native, asked for, blind render: on, no hook", args: []string{"--set", "extender.mode=native", "--set", "extender.releaseFinalizer=true"}, on: true},
		{name: "native, off", args: []string{"--set", "extender.mode=native", "--set", "extender.releaseFinalizer=false"}},
		{name: "native on v1.35, auto: off, not a failure", args: []string{"--kube-version", "1.35.0", "--set", "extender.mode=native"}},
		{name: "native on v1.35, asked for", args: []string{"--kube-version", "1.35.0", "--set", "extender.mode=native", "--set", "extender.releaseFinalizer=true"},
			err: "extender.releaseFinalizer needs the cluster to serve MutatingAdmissionPolicy"},
		{name: "extender mode, auto", args: []string{"--set", "extender.mode=extender"}},
		{name: "plugin mode, auto", args: []string{"--set", "extender.mode=plugin"}},
		{name: "extender mode, asked for", args: []string{"--set", "extender.mode=extender", "--set", "extender.releaseFinalizer=true"}, err: "extender.releaseFinalizer is native mode's"},
		{name: "plugin mode, asked for", args: []string{"--set", "extender.mode=plugin", "--set", "extender.releaseFinalizer=true"}, err: "extender.releaseFinalizer is native mode's"},
		{name: "not a choice", args: []string{"--set", "extender.mode=native", "--set", "extender.releaseFinalizer=yes"}, err: "releaseFinalizer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplate(t, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want the render to refuse with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range policies {
				if _, ok := r[key]; ok != tc.on {
					t.Errorf("%s rendered: %v, want %v", key, ok, tc.on)
				}
			}
			for _, key := range hook {
				if _, ok := r[key]; ok {
					t.Errorf("a render that cannot see the cluster renders the uninstall hook's %s", key)
				}
			}
			if _, native := r[objectKey("ClusterRole", "", "capscale:capacity-publisher")]; native && podsPatch(r) != tc.on {
				t.Errorf("the publisher may patch pods: %v, want %v", podsPatch(r), tc.on)
			}
		})
	}
}

// TestReleaseCleanupManifest: deploy/native/release-cleanup.yaml, for
// installs that run no Helm hook, runs `extender release-cleanup` as its
// own ServiceAccount, which may delete only the release policy and its
// binding and patch pods, and which release.yaml's ValidatingAdmissionPolicy
// holds to removing the finalizer (e2e TestNativeReleasePolicies and
// TestHelmReleaseCleanup run them on kube-apiserver).
func TestReleaseCleanupManifest(t *testing.T) {
	b, err := os.ReadFile("native/release-cleanup.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := decodeRender(t, string(b))
	job := get[*batchv1.Job](t, r, objectKey("Job", "capscale-system", "capscale-release-cleanup"))
	spec := job.Spec.Template.Spec
	if c := spec.Containers[0]; !slices.Equal(c.Command, []string{"/extender", "release-cleanup", "--wait=90s"}) || spec.ServiceAccountName != "capscale-release-cleanup" {
		t.Errorf("the Job runs %v as %s", c.Command, spec.ServiceAccountName)
	}
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d <= 90 {
		t.Errorf("activeDeadlineSeconds %v: want more than the command's --wait", d)
	}
	role := get[*rbacv1.ClusterRole](t, r, objectKey("ClusterRole", "", "capscale:release-cleanup"))
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingadmissionpolicies", "mutatingadmissionpolicybindings"},
			ResourceNames: []string{"capscale-underlay-ip-release"}, Verbs: []string{"delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("capscale:release-cleanup rules %+v, want %+v", role.Rules, want)
	}
	crb := get[*rbacv1.ClusterRoleBinding](t, r, objectKey("ClusterRoleBinding", "", "capscale:release-cleanup"))
	if len(crb.Subjects) != 1 || crb.Subjects[0].Name != "capscale-release-cleanup" || crb.RoleRef.Name != role.Name {
		t.Errorf("capscale:release-cleanup binds %+v to %+v", crb.RoleRef, crb.Subjects)
	}
	rb, err := os.ReadFile("native/release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rb), "'system:serviceaccount:capscale-system:capscale-release-cleanup'") {
		t.Error("release.yaml's ValidatingAdmissionPolicy does not hold capscale-release-cleanup's pod writes")
	}
}

// TestHelmExtenderPublishCapacity: extender.publishCapacity runs native
// mode's publisher in extender mode, beside the rule: the extender sidecar
// gets --publish-capacity and the ServiceAccounts the publisher's RBAC and
// Node-write policy, while kube-scheduler keeps extender mode's profile
// (it calls the extender and ignores the resource). Plugin mode, which runs
// no extender, refuses it; extender mode without it renders none of it.
func TestHelmExtenderPublishCapacity(t *testing.T) {
	r, err := helmTemplate(t, "--set", "extender.mode=extender", "--set", "extender.publishCapacity=true")
	if err != nil {
		t.Fatal(err)
	}
	d := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
	if c := container(t, d, "extender"); !slices.Contains(c.Command, "--publish-capacity") {
		t.Errorf("extender command %v lacks --publish-capacity", c.Command)
	}
	publisher := []string{
		objectKey("ClusterRole", "", "capscale:capacity-publisher"),
		objectKey("ClusterRoleBinding", "", "capscale:scheduler:capacity-publisher"),
		objectKey("ValidatingAdmissionPolicy", "", "capscale-publisher-node-writes"),
	}
	for _, key := range publisher {
		if _, ok := r[key]; !ok {
			t.Errorf("extender mode with publishCapacity renders no %s", key)
		}
	}
	if _, ok := r[objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-ip-release")]; ok {
		t.Error("extender mode renders native mode's release finalizer")
	}
	cm := get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config"))
	if !strings.Contains(cm.Data["config.yaml"], "ignoredByScheduler: true") {
		t.Errorf("kube-scheduler's profile is not extender mode's (the extender, the resource ignored):\n%s", cm.Data["config.yaml"])
	}

	plain, err := helmTemplate(t, "--set", "extender.mode=extender")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range publisher {
		if _, ok := plain[key]; ok {
			t.Errorf("extender mode without publishCapacity renders %s", key)
		}
	}
	_, err = helmTemplate(t, "--set", "extender.mode=plugin", "--set", "extender.publishCapacity=true")
	if want := "extender.publishCapacity runs the capacity publisher in the extender, and plugin mode runs none"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("plugin mode with publishCapacity: %v, want an error saying %q", err, want)
	}
}
