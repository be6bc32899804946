package deploy

import (
	"encoding/json"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/diff"

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
// The default (auto) is on in plugin mode; with false, none of it.
func TestHelmSchedulerReads(t *testing.T) {
	const values = "controller: {capacitySources: {enabled: true, %s sources: [" +
		"{name: cilium, preset: cilium-eni}, " +
		"{name: mine, resource: {group: ipam.example.com, version: v1, resource: nodepools}, namespace: ipam, node: object.metadata.name, capacity: '1', draws: marked}]}}"
	scheduler := objectKey("Deployment", "capscale-system", "capscale-scheduler")
	for _, c := range []struct {
		value string
		on    bool
	}{{"schedulerReads: true,", true}, {"", true}, {"schedulerReads: auto,", true}, {"schedulerReads: false,", false}} {
		on := c.on
		r, err := helmTemplate(t, "-f", writeValues(t, strings.Replace(values, "%s", c.value, 1)))
		if err != nil {
			t.Fatalf("%q: %v", c.value, err)
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
		checkSchedulerReadsRBAC(t, r)
	}
}

// TestHelmSchedulerReadsAuto: the default, auto, is off where the scheduler
// cannot read the sources (extender and native modes, no wait for the
// mirror, no sources), and the render goes on: only an explicit true is
// refused there (next test). Native mode's case has publisherReads off:
// the publisher's own read binds the same ClusterRole to capscale-scheduler
// (TestHelmPublisherReads).
func TestHelmSchedulerReadsAuto(t *testing.T) {
	for name, values := range map[string]string{
		"extender mode": "extender: {mode: extender}\ncontroller: {capacitySources: {enabled: true}}",
		"native mode":   "extender: {mode: native}\ncontroller: {capacitySources: {enabled: true, publisherReads: false}}",
		"no wait":       "controller: {capacitySources: {enabled: true, awaitMirror: false}}",
		"no sources":    "controller: {capacitySources: {enabled: false, schedulerReads: auto}}",
	} {
		r, err := helmTemplate(t, "-f", writeValues(t, values))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, ok := r[objectKey("ClusterRole", "", "capscale:scheduler:capacity-sources")]; ok {
			t.Errorf("%s: the scheduler may read the sources", name)
		}
		if key := objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config"); r[key].raw != nil {
			if cfg := get[*corev1.ConfigMap](t, r, key).Data["config.yaml"]; strings.Contains(cfg, "capacitySources") {
				t.Errorf("%s: the scheduler's configuration names the sources:\n%s", name, cfg)
			}
		}
		if key := objectKey("Deployment", "capscale-system", "capscale-controller"); r[key].raw != nil {
			if ctrl := container(t, get[*appsv1.Deployment](t, r, key), "controller"); slices.Contains(ctrl.Command, "--capacity-source-qps=10") {
				t.Errorf("%s: the mirror's writes held to 10 a second though the scheduler follows it: %v", name, ctrl.Command)
			}
		}
	}
}

// TestHelmSchedulerReadsRefused: schedulerReads outside plugin and extender
// modes, or without the wait for the mirror it takes the place of, fails
// the render with a message naming the value.
func TestHelmSchedulerReadsRefused(t *testing.T) {
	for name, values := range map[string]string{
		"native mode": "extender: {mode: native}\ncontroller: {capacitySources: {enabled: true, schedulerReads: true}}",
		"DRA mode":    "extender: {mode: dra}\ncontroller: {capacitySources: {enabled: true, schedulerReads: true}}",
		"no wait":     "controller: {capacitySources: {enabled: true, schedulerReads: true, awaitMirror: false}}",
		"no sources":  "controller: {capacitySources: {enabled: false, schedulerReads: true}}",
	} {
		_, err := helmTemplate(t, "-f", writeValues(t, values))
		if err == nil || !strings.Contains(err.Error(), "controller.capacitySources.schedulerReads") {
			t.Errorf("%s: want a failure naming controller.capacitySources.schedulerReads, got %v", name, err)
		}
	}
}

// TestSchedulerReadsKustomize: deploy/ in plugin mode with the components
// capacity-sources and capacity-sources/scheduler-reads renders what the
// chart renders by default in plugin mode with sources on: the scheduler's
// Deployment (but the chart's checksums) and configuration, its RBAC to
// read the sources, and the controller's Deployment.
func TestSchedulerReadsKustomize(t *testing.T) {
	want, err := kustomizeMode(t, "plugin", "capacity-sources", "capacity-sources/scheduler-reads")
	if err != nil {
		t.Fatal(err)
	}
	got, err := helmTemplate(t, "--set", "controller.capacitySources.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	config := objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config")
	if w, g := pluginConfigMap(t, get[*corev1.ConfigMap](t, want, config)), pluginConfigMap(t, get[*corev1.ConfigMap](t, got, config)); !reflect.DeepEqual(w, g) {
		t.Errorf("the scheduler's configuration differs (- kustomize, + chart):\n%s", diff.Diff(w, g))
	}
	if args := underlayIPArgs(t, pluginConfigMap(t, get[*corev1.ConfigMap](t, want, config))); args["capacitySources"] == nil {
		t.Errorf("kustomize's plugin args name no sources: %v", args)
	}
	for _, key := range []string{
		objectKey("Deployment", "capscale-system", "capscale-scheduler"),
		objectKey("Deployment", "capscale-system", "capscale-controller"),
		objectKey("ClusterRole", "", "capscale:scheduler:capacity-sources"),
		objectKey("ClusterRoleBinding", "", "capscale:scheduler:capacity-sources"),
	} {
		sameAsKustomize(t, want, got, key)
	}
}

// checkSchedulerReadsRBAC: in r (the tests' values: the cilium-eni source
// and a namespaced nodepools source in ipam), capscale-scheduler's
// ServiceAccount may read each source's resource and nothing more.
func checkSchedulerReadsRBAC(t *testing.T, r rendered) {
	t.Helper()
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

// sameAsKustomize: key is rendered by deploy/ (want) and by the chart (got)
// alike, but for Helm's labels and the chart's pod checksums (the chart's
// roll its pods; kustomize's are applied by hand). Each of normalize then
// runs on both sides (flags kustomize can only append, say).
func sameAsKustomize(t *testing.T, want, got rendered, key string, normalize ...func(map[string]any) map[string]any) {
	t.Helper()
	w, ok := want[key]
	if !ok {
		t.Fatalf("deploy/ with the components lacks %s", key)
	}
	g, ok := got[key]
	if !ok {
		t.Fatalf("the chart lacks %s", key)
	}
	gr, wr := withoutHelmLabels(g.raw, labelsOf(w.raw)), w.raw
	if spec, ok := gr["spec"].(map[string]any); ok && spec["template"] != nil {
		delete(spec["template"].(map[string]any)["metadata"].(map[string]any), "annotations")
	}
	for _, n := range normalize {
		gr, wr = n(gr), n(wr)
	}
	if !reflect.DeepEqual(gr, wr) {
		t.Errorf("%s differs (- kustomize, + chart):\n%s", key, diff.Diff(wr, gr))
	}
}
