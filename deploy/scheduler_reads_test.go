package deploy

import (
	"encoding/json"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/schedplugin"
)

// TestHelmSchedulerReads: with controller.capacitySources.schedulerReads,
// capscale-scheduler gets the plugin's capacitySources argument, which the
// plugin's own decoder accepts; the file it names is the sources
// ConfigMap, mounted there; its pods roll when the sources change; and it
// may read each source's resource (a namespaced one in its namespace) and
// nothing more; the controller's mirror, read now only by kubectl capscale
// ips and the workload API, writes 10 Nodes a second after its first pass.
// Without the value, none of it.
func TestHelmSchedulerReads(t *testing.T) {
	const values = "controller: {capacitySources: {enabled: true, schedulerReads: %s, sources: [" +
		"{name: cilium, preset: cilium-eni}, " +
		"{name: mine, resource: {group: ipam.example.com, version: v1, resource: nodepools}, namespace: ipam, node: object.metadata.name, capacity: '1', draws: marked}]}}"
	scheduler := objectKey("Deployment", "capscale-system", "capscale-scheduler")
	for _, on := range []bool{true, false} {
		r, err := helmTemplate(t, "-f", writeValues(t, strings.Replace(values, "%s", map[bool]string{true: "true", false: "false"}[on], 1)))
		if err != nil {
			t.Fatal(err)
		}
		args := underlayIPArgs(t, pluginConfigMap(t, get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config"))))
		raw, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := schedplugin.DecodeArgs(&runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON})
		if err != nil {
			t.Fatalf("schedulerReads %v: the plugin refuses the chart's args %s: %v", on, raw, err)
		}
		ctrl := container(t, get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-controller")), "controller")
		if slowed := slices.Contains(ctrl.Command, "--capacity-source-qps=10"); slowed != on {
			t.Errorf("schedulerReads %v: the mirror's writes held to 10 a second: %v (%v)", on, slowed, ctrl.Command)
		}
		d := get[*appsv1.Deployment](t, r, scheduler)
		_, rolls := d.Spec.Template.Annotations["capscale.io/capacity-sources-checksum"]
		_, crOK := r[objectKey("ClusterRole", "", "capscale:scheduler:capacity-sources")]
		_, rbOK := r[objectKey("RoleBinding", "ipam", "capscale:scheduler:capacity-sources")]
		if !on {
			if decoded.CapacitySources != "" || volume(d, "capacity-sources") != nil || rolls || crOK || rbOK {
				t.Errorf("schedulerReads false: the scheduler reads the sources (args %s, volume %v, checksum %v, ClusterRole %v, RoleBinding %v)",
					raw, volume(d, "capacity-sources") != nil, rolls, crOK, rbOK)
			}
			continue
		}
		if !decoded.AwaitCapacitySource || decoded.CapacitySources == "" {
			t.Fatalf("the plugin's args %s: want awaitCapacitySource and capacitySources", raw)
		}
		v := volume(d, "capacity-sources")
		if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "capscale-capacity-sources" {
			t.Fatalf("the scheduler mounts no capscale-capacity-sources: %+v", v)
		}
		c := container(t, d, "kube-scheduler")
		mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "capacity-sources" && m.ReadOnly && path.Join(m.MountPath, "sources.yaml") == decoded.CapacitySources
		})
		if !mounted {
			t.Errorf("%s is not the mounted ConfigMap's sources.yaml: %+v", decoded.CapacitySources, c.VolumeMounts)
		}
		if !rolls {
			t.Error("the scheduler's pods carry no sources checksum: a change of the sources would not reach the plugin")
		}
		cm := get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-capacity-sources"))
		if f, err := capacitysource.Decode([]byte(cm.Data["sources.yaml"])); err != nil {
			t.Fatal(err)
		} else if _, err := f.Compile(); err != nil {
			t.Fatal(err)
		}
		cr := get[*rbacv1.ClusterRole](t, r, objectKey("ClusterRole", "", "capscale:scheduler:capacity-sources"))
		want := []rbacv1.PolicyRule{{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumnodes"}, Verbs: []string{"get", "list", "watch"}}}
		if !equalRules(cr.Rules, want) {
			t.Errorf("ClusterRole capscale:scheduler:capacity-sources: %+v, want only %+v", cr.Rules, want)
		}
		crb := get[*rbacv1.ClusterRoleBinding](t, r, objectKey("ClusterRoleBinding", "", "capscale:scheduler:capacity-sources"))
		rb := get[*rbacv1.RoleBinding](t, r, objectKey("RoleBinding", "ipam", "capscale:scheduler:capacity-sources"))
		for _, subjects := range [][]rbacv1.Subject{crb.Subjects, rb.Subjects} {
			if len(subjects) != 1 || subjects[0].Name != "capscale-scheduler" || subjects[0].Namespace != "capscale-system" {
				t.Errorf("bound to %+v, want ServiceAccount capscale-system/capscale-scheduler", subjects)
			}
		}
		role := get[*rbacv1.Role](t, r, objectKey("Role", "ipam", rb.RoleRef.Name))
		if want := []rbacv1.PolicyRule{{APIGroups: []string{"ipam.example.com"}, Resources: []string{"nodepools"}, Verbs: []string{"get", "list", "watch"}}}; !equalRules(role.Rules, want) {
			t.Errorf("Role %s in ipam: %+v, want only %+v", rb.RoleRef.Name, role.Rules, want)
		}
	}
}

// TestHelmSchedulerReadsRefused: schedulerReads outside plugin mode, or
// without the wait for the mirror it takes the place of, fails the render
// with a message naming the value.
func TestHelmSchedulerReadsRefused(t *testing.T) {
	for name, values := range map[string]string{
		"extender mode": "extender: {mode: extender}\ncontroller: {capacitySources: {enabled: true, schedulerReads: true}}",
		"no wait":       "controller: {capacitySources: {enabled: true, schedulerReads: true, awaitMirror: false}}",
		"no sources":    "controller: {capacitySources: {enabled: false, schedulerReads: true}}",
	} {
		_, err := helmTemplate(t, "-f", writeValues(t, values))
		if err == nil || !strings.Contains(err.Error(), "controller.capacitySources.schedulerReads") {
			t.Errorf("%s: want a failure naming controller.capacitySources.schedulerReads, got %v", name, err)
		}
	}
}
