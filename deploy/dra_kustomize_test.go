package deploy

import (
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/diff"
)

// TestKustomizeDRA: deploy/ in extender mode with the component deploy/dra
// is DRA mode as the chart's extender.mode=dra renders it: the extender
// publishes devices, capscale-scheduler runs the chart's DRA configuration
// (no extender), the policy that moves pods to capscale-scheduler is gone,
// and the device publisher's bindings and slice policy name the
// ServiceAccount it runs as; the DeviceClass and the kubelet plugin are
// there. e2e TestDRAMode applies this render (kubectl apply
// --dry-run=server).
func TestKustomizeDRA(t *testing.T) {
	r, err := kustomizeMode(t, "extender", "dra")
	if err != nil {
		t.Fatalf("deploy/ with deploy/dra does not render: %v", err)
	}
	chart, err := helmTemplate(t, "--set", "extender.mode=dra")
	if err != nil {
		t.Fatal(err)
	}
	sched := objectKey("Deployment", "capscale-system", "capscale-scheduler")
	if c := container(t, get[*appsv1.Deployment](t, r, sched), "extender"); !slices.Contains(c.Command, "--publish-devices") {
		t.Errorf("the extender does not publish devices: %v", c.Command)
	}
	cm := objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config")
	got := schedulerConfig(t, []byte(get[*corev1.ConfigMap](t, r, cm).Data["config.yaml"]))
	want := schedulerConfig(t, []byte(get[*corev1.ConfigMap](t, chart, cm).Data["config.yaml"]))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("scheduler configuration differs from the chart's in DRA mode (- chart, + deploy/dra):\n%s", diff.Diff(want, got))
	}
	for _, k := range []string{
		objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-scheduler"),
		objectKey("MutatingAdmissionPolicyBinding", "", "capscale-underlay-scheduler"),
	} {
		if _, ok := r[k]; ok {
			t.Errorf("renders %s, which would move pods off default-scheduler", k)
		}
	}
	for _, k := range []string{
		objectKey("DeviceClass", "", "underlay-ip.capscale.io"),
		objectKey("DaemonSet", "capscale-system", "capscale-dra-kubelet-plugin"),
		objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-ip"),
	} {
		if _, ok := r[k]; !ok {
			t.Errorf("does not render %s", k)
		}
	}
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "capscale-scheduler", Namespace: "capscale-system"}
	if s := get[*rbacv1.ClusterRoleBinding](t, r, objectKey("ClusterRoleBinding", "", "capscale:device-publisher")).Subjects; !reflect.DeepEqual(s, []rbacv1.Subject{sa}) {
		t.Errorf("the device publisher's ClusterRoleBinding binds %+v, want the scheduler Pod's ServiceAccount", s)
	}
	if s := get[*rbacv1.RoleBinding](t, r, objectKey("RoleBinding", "capscale-system", "capscale:device-publisher")).Subjects; !reflect.DeepEqual(s, []rbacv1.Subject{sa}) {
		t.Errorf("the device publisher's RoleBinding binds %+v, want the scheduler Pod's ServiceAccount", s)
	}
	// The gate on the kubelet plugin's pods, as the chart sets it.
	e, ce := container(t, get[*appsv1.Deployment](t, r, sched), "extender"), container(t, get[*appsv1.Deployment](t, chart, sched), "extender")
	for _, f := range []string{"--kubelet-plugin-selector", "--kubelet-plugin-namespace"} {
		if g, w := flagValue(e.Command, f), flagValue(ce.Command, f); g == "" || g != w {
			t.Errorf("the extender's %s=%q, want the chart's %q", f, g, w)
		}
	}
	pods := objectKey("Role", "capscale-system", "capscale:device-publisher:kubelet-plugins")
	if g, w := get[*rbacv1.Role](t, r, pods).Rules, get[*rbacv1.Role](t, chart, pods).Rules; !reflect.DeepEqual(g, w) {
		t.Errorf("the kubelet plugins' Role %+v, want the chart's %+v", g, w)
	}
	pb := objectKey("RoleBinding", "capscale-system", "capscale:device-publisher:kubelet-plugins")
	if s := get[*rbacv1.RoleBinding](t, r, pb).Subjects; !reflect.DeepEqual(s, []rbacv1.Subject{sa}) {
		t.Errorf("the kubelet plugins' RoleBinding binds %+v, want the scheduler Pod's ServiceAccount", s)
	}
	vap := objectKey("ValidatingAdmissionPolicy", "", "capscale-device-publisher-slices")
	if g, w := r[vap].raw["spec"], chart[vap].raw["spec"]; !reflect.DeepEqual(g, w) {
		t.Errorf("the slice policy differs from the chart's (- chart, + deploy/dra):\n%s", diff.Diff(w, g))
	}
}
