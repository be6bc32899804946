package deploy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

var (
	kubeletPluginDS   = objectKey("DaemonSet", "capscale-system", "capscale-dra-kubelet-plugin")
	kubeletPluginRole = objectKey("ClusterRole", "", "capscale:dra-kubelet-plugin")
)

// TestHelmDRAKubeletPlugin: in DRA mode the chart runs the kubelet plugin
// as deploy/dra/kubelet-plugin.yaml does, object for object but Helm's
// labels; it may only get ResourceClaims, mounts only the kubelet's plugin
// registry and its own directory, and the extender does not mark slices
// as needing no plugin.
func TestHelmDRAKubeletPlugin(t *testing.T) {
	got, err := helmTemplate(t, "--set", "extender.mode=dra")
	if err != nil {
		t.Fatal(err)
	}
	want := decodeRender(t, string(mustRead(t, "dra/kubelet-plugin.yaml")))
	sub := rendered{}
	for k := range want {
		if o, ok := got[k]; ok {
			sub[k] = o
		}
	}
	compareToKustomize(t, want, sub, "deploy/dra/kubelet-plugin.yaml")

	rules := get[*rbacv1.ClusterRole](t, got, kubeletPluginRole).Rules
	if w := []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}}}; !reflect.DeepEqual(rules, w) {
		t.Errorf("the kubelet plugin's rules %+v, want only get resourceclaims", rules)
	}
	ds := get[*appsv1.DaemonSet](t, got, kubeletPluginDS)
	var paths []string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil {
			t.Errorf("volume %s is not a host path", v.Name)
			continue
		}
		paths = append(paths, v.HostPath.Path)
	}
	if w := []string{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/ip.capscale.io"}; !slices.Equal(paths, w) {
		t.Errorf("host paths %v, want exactly %v", paths, w)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.Privileged != nil || len(sc.Capabilities.Add) > 0 || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v: want no privilege, no capability, read-only root", sc)
	}
	d := get[*appsv1.Deployment](t, got, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
	if e := container(t, d, "extender"); slices.Contains(e.Command, "--skip-node-operations") {
		t.Errorf("extender command %v marks slices as needing no plugin while the plugin runs", e.Command)
	}
}

// TestHelmDRAKubeletPluginValues: the kubelet's root directory moves both
// paths; enabled=false renders no plugin; the plugin and
// --skip-node-operations exclude each other; no other mode renders it.
func TestHelmDRAKubeletPluginValues(t *testing.T) {
	r, err := helmTemplate(t, "--set", "extender.mode=dra", "--set", "extender.kubeletPlugin.kubeletDir=/data/kubelet/")
	if err != nil {
		t.Fatal(err)
	}
	ds := get[*appsv1.DaemonSet](t, r, kubeletPluginDS)
	cmd := strings.Join(ds.Spec.Template.Spec.Containers[0].Command, " ")
	if !strings.Contains(cmd, "--kubelet-registry-dir=/data/kubelet/plugins_registry") || !strings.Contains(cmd, "--plugin-dir=/data/kubelet/plugins/ip.capscale.io") {
		t.Errorf("command %q does not follow kubeletDir /data/kubelet/", cmd)
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if !strings.HasPrefix(v.HostPath.Path, "/data/kubelet/plugins") {
			t.Errorf("host path %s outside /data/kubelet", v.HostPath.Path)
		}
	}
	if r, err = helmTemplate(t, "--set", "extender.mode=dra", "--set", "extender.kubeletPlugin.enabled=false", "--set", "extender.extraArgs={--skip-node-operations}"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r[kubeletPluginDS]; ok {
		t.Error("extender.kubeletPlugin.enabled=false renders the DaemonSet")
	}
	_, err = helmTemplate(t, "--set", "extender.mode=dra", "--set", "extender.extraArgs={--skip-node-operations}")
	if err == nil || !strings.Contains(err.Error(), "leave --skip-node-operations") {
		t.Errorf("the plugin with --skip-node-operations: %v, want the refusal", err)
	}
	for _, mode := range []string{"plugin", "extender", "native"} {
		r, err := helmTemplate(t, "--set", "extender.mode="+mode)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := r[kubeletPluginDS]; ok {
			t.Errorf("%s mode renders the DRA kubelet plugin", mode)
		}
	}
}
