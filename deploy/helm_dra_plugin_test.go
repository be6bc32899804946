package deploy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
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

// TestHelmDRAKubeletPluginGate: the plugin runs on the host's network (no
// pod IP, so none of the node's underlay IPs) and is Ready by /readyz on
// 127.0.0.1 at its --health-port; the extender watches exactly the
// DaemonSet's pods, in the release namespace, with a Role that may only
// read pods there. Without the plugin neither the flag nor the Role.
func TestHelmDRAKubeletPluginGate(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		port int32
	}{
		{name: "default", args: []string{"--set", "extender.mode=dra"}, port: 9809},
		{name: "another port and namespace", args: []string{"--set", "extender.mode=dra", "--set", "extender.kubeletPlugin.healthPort=19809", "--namespace", "ops"}, port: 19809},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplate(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			ns := "capscale-system"
			if slices.Contains(tc.args, "ops") {
				ns = "ops"
			}
			ds := get[*appsv1.DaemonSet](t, r, objectKey("DaemonSet", ns, "capscale-dra-kubelet-plugin"))
			spec := ds.Spec.Template.Spec
			if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
				t.Errorf("hostNetwork %v, dnsPolicy %q: want the host's network and ClusterFirstWithHostNet", spec.HostNetwork, spec.DNSPolicy)
			}
			c := spec.Containers[0]
			if len(c.Ports) > 0 {
				t.Errorf("ports %v: /readyz is on loopback, nothing to declare", c.Ports)
			}
			p := c.ReadinessProbe
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "127.0.0.1" || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.IntVal != tc.port {
				t.Errorf("readiness probe %+v, want GET 127.0.0.1:%d/readyz", p, tc.port)
			}
			if !slices.Contains(c.Command, fmt.Sprintf("--health-port=%d", tc.port)) {
				t.Errorf("command %v does not serve /readyz on %d", c.Command, tc.port)
			}

			e := container(t, get[*appsv1.Deployment](t, r, objectKey("Deployment", ns, "capscale-scheduler")), "extender")
			sel, gotNS := flagValue(e.Command, "--kubelet-plugin-selector"), flagValue(e.Command, "--kubelet-plugin-namespace")
			s, err := labels.Parse(sel)
			if err != nil || sel == "" || !s.Matches(labels.Set(ds.Spec.Template.Labels)) || gotNS != ns {
				t.Errorf("the extender's --kubelet-plugin-selector=%q (%v) in %q: want one that selects the DaemonSet's pods %v in %s", sel, err, gotNS, ds.Spec.Template.Labels, ns)
			}
			role := get[*rbacv1.Role](t, r, objectKey("Role", ns, "capscale:device-publisher:kubelet-plugins"))
			if w := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}; !reflect.DeepEqual(role.Rules, w) {
				t.Errorf("the kubelet plugins' Role %+v, want only reading pods", role.Rules)
			}
			rb := get[*rbacv1.RoleBinding](t, r, objectKey("RoleBinding", ns, "capscale:device-publisher:kubelet-plugins"))
			if w := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "capscale-scheduler", Namespace: ns}}; !reflect.DeepEqual(rb.Subjects, w) || rb.RoleRef.Name != role.Name {
				t.Errorf("the kubelet plugins' RoleBinding %+v to %s, want the extender's ServiceAccount", rb.Subjects, rb.RoleRef.Name)
			}
		})
	}
	r, err := helmTemplate(t, "--set", "extender.mode=dra", "--set", "extender.kubeletPlugin.enabled=false", "--set", "extender.extraArgs={--skip-node-operations}")
	if err != nil {
		t.Fatal(err)
	}
	if e := container(t, get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler")), "extender"); flagValue(e.Command, "--kubelet-plugin-selector") != "" {
		t.Errorf("without the plugin the extender still waits for it: %v", e.Command)
	}
	if _, ok := r[objectKey("Role", "capscale-system", "capscale:device-publisher:kubelet-plugins")]; ok {
		t.Error("without the plugin the chart still lets the extender read pods for it")
	}
}

// flagValue is the value of --name=value in argv, "" if absent.
func flagValue(argv []string, name string) string {
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
