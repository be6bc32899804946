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
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/diff"

	"github.com/capscale/capscale/controller/capacitysource"
)

const capacitySourcesFlag = "--capacity-sources=/etc/capscale/capacity-sources/sources.yaml"

// TestCapacitySourcesDeploy: capacity sources are off by default in deploy/
// and the chart; the chart's controller.capacitySources renders the same
// controller Deployment, RBAC and sources as deploy/ with the
// capacity-sources component (plus a checksum annotation that rolls the
// pods when the sources change), and the sources it renders compile.
func TestCapacitySourcesDeploy(t *testing.T) {
	deployment := objectKey("Deployment", "capscale-system", "capscale-controller")
	configMap := objectKey("ConfigMap", "capscale-system", "capscale-capacity-sources")
	role := objectKey("ClusterRole", "", "capscale:controller:capacity-sources")
	binding := objectKey("ClusterRoleBinding", "", "capscale:controller:capacity-sources")

	off, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	if c := container(t, get[*appsv1.Deployment](t, off, deployment), "controller"); slices.Contains(c.Command, capacitySourcesFlag) {
		t.Errorf("capacity sources are on by default: %v", c.Command)
	}
	if _, ok := off[role]; ok {
		t.Error("the chart grants the mirror's RBAC by default")
	}

	// deploy/ stands in extender mode, where the scheduler follows the
	// mirror; plugin mode's default, the scheduler reading the sources
	// itself, is TestSchedulerReadsKustomize's.
	want := kustomizeCapacitySources(t)
	got, err := helmTemplate(t, "--set", "controller.capacitySources.enabled=true", "--set", "controller.capacitySources.schedulerReads=false")
	if err != nil {
		t.Fatal(err)
	}
	d := get[*appsv1.Deployment](t, got, deployment)
	if d.Spec.Template.Annotations["capscale.io/capacity-sources-checksum"] == "" {
		t.Error("the chart's controller pods carry no checksum of the sources: a change would not restart them")
	}
	for _, key := range []string{deployment, role, binding} {
		w, ok := want[key]
		if !ok {
			t.Fatalf("deploy/ with the component lacks %s", key)
		}
		g, ok := got[key]
		if !ok {
			t.Fatalf("the chart lacks %s", key)
		}
		normalized := withoutHelmLabels(g.raw, labelsOf(w.raw))
		if key == deployment {
			tmpl := normalized["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
			delete(tmpl, "annotations")
		}
		if !reflect.DeepEqual(normalized, w.raw) {
			t.Errorf("%s differs (- kustomize with the component, + helm with capacitySources.enabled):\n%s", key, diff.Diff(w.raw, normalized))
		}
	}
	// The same sources, and they compile as capscale-controller loads them.
	for name, r := range map[string]rendered{"deploy/capacity-sources": want, "the chart": got} {
		cm := get[*corev1.ConfigMap](t, r, configMap)
		f, err := capacitysource.Decode([]byte(cm.Data["sources.yaml"]))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := f.Compile(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(f.Sources) != 1 || f.Sources[0].Name != "cilium" || f.Sources[0].Preset != "cilium-eni" {
			t.Errorf("%s: sources %+v, want cilium from preset cilium-eni", name, f.Sources)
		}
	}
}

// TestHelmCapacitySourceUsedFrom: the chart grants the resource a source's
// usedFrom reads (in its namespace), its preset's unless the source says
// used itself, and nothing more.
func TestHelmCapacitySourceUsedFrom(t *testing.T) {
	for _, tc := range []struct {
		name, source string
		ippools      bool
		role         string
	}{
		{name: "the preset's cluster-wide", source: "{name: wb, preset: whereabouts-node-slice}", ippools: true},
		{name: "the preset's in the source's namespace", source: "{name: wb, preset: whereabouts-node-slice, namespace: whereabouts}", role: "whereabouts"},
		{name: "the source says used", source: "{name: wb, preset: whereabouts-node-slice, used: '0'}"},
		{name: "its own", source: "{name: mine, resource: {group: ipam.example.com, version: v1, resource: nodepools}, node: object.metadata.name, capacity: '1', draws: marked, " +
			"usedFrom: {resource: {group: whereabouts.cni.cncf.io, version: v1alpha1, resource: ippools}, namespace: ipam, node: object.metadata.name, used: '0'}}", role: "ipam"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplate(t, "-f", writeValues(t, "controller: {capacitySources: {enabled: true, sources: ["+tc.source+"]}}"))
			if err != nil {
				t.Fatal(err)
			}
			ippools := func(rules []rbacv1.PolicyRule) bool {
				return slices.ContainsFunc(rules, func(pr rbacv1.PolicyRule) bool {
					return slices.Equal(pr.APIGroups, []string{"whereabouts.cni.cncf.io"}) && slices.Equal(pr.Resources, []string{"ippools"}) &&
						slices.Equal(pr.Verbs, []string{"get", "list", "watch"})
				})
			}
			cr := get[*rbacv1.ClusterRole](t, r, objectKey("ClusterRole", "", "capscale:controller:capacity-sources"))
			if got := ippools(cr.Rules); got != tc.ippools {
				t.Errorf("ClusterRole reads ippools: %v, want %v (%+v)", got, tc.ippools, cr.Rules)
			}
			if tc.role != "" {
				if rules := get[*rbacv1.Role](t, r, objectKey("Role", tc.role, "capscale:controller:capacity-sources")).Rules; !ippools(rules) {
					t.Errorf("Role in %s: %+v, want ippools read", tc.role, rules)
				}
			}
			cm := get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-capacity-sources"))
			if f, err := capacitysource.Decode([]byte(cm.Data["sources.yaml"])); err != nil {
				t.Fatal(err)
			} else if _, err := f.Compile(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHelmCapacitySourcePresets: the chart's table of the presets'
// resources (for RBAC) is capscale-controller's, and each source gets read
// access to exactly its resource, in its namespace when it has one.
func TestHelmCapacitySourcePresets(t *testing.T) {
	var values strings.Builder
	values.WriteString("controller:\n  capacitySources:\n    enabled: true\n    sources:\n")
	for _, p := range capacitysource.PresetNames() {
		values.WriteString("    - {name: " + p + ", preset: " + p + "}\n")
	}
	values.WriteString("    - {name: mine, resource: {group: ipam.example.com, version: v1, resource: nodepools}, node: object.metadata.name, capacity: '1', draws: marked}\n")
	values.WriteString("    - {name: mine-ns, namespace: ipam, resource: {version: v1, resource: configmaps}, node: object.metadata.name, capacity: '1', draws: all}\n")
	r, err := helmTemplate(t, "-f", writeValues(t, values.String()))
	if err != nil {
		t.Fatal(err)
	}
	cr := get[*rbacv1.ClusterRole](t, r, objectKey("ClusterRole", "", "capscale:controller:capacity-sources"))
	reads := func(rules []rbacv1.PolicyRule, group, resource string) bool {
		return slices.ContainsFunc(rules, func(pr rbacv1.PolicyRule) bool {
			return slices.Equal(pr.APIGroups, []string{group}) && slices.Equal(pr.Resources, []string{resource}) &&
				slices.Equal(pr.Verbs, []string{"get", "list", "watch"})
		})
	}
	for _, name := range capacitysource.PresetNames() {
		p, _ := capacitysource.Source{Name: name, Preset: name}.Expand()
		// Its resource and its usedFrom's (whereabouts' IPPools).
		for _, rd := range p.Reads() {
			rules := cr.Rules
			if rd.Namespace != "" {
				rules = get[*rbacv1.Role](t, r, objectKey("Role", rd.Namespace, "capscale:controller:capacity-sources")).Rules
				if reads(cr.Rules, rd.Resource.Group, rd.Resource.Resource) {
					t.Errorf("preset %s: %s is read cluster-wide, want only in %s", name, rd.Resource, rd.Namespace)
				}
			}
			if !reads(rules, rd.Resource.Group, rd.Resource.Resource) {
				t.Errorf("preset %s: the chart grants no read of %s (namespace %q): rules %+v", name, rd.Resource, rd.Namespace, rules)
			}
		}
	}
	if !reads(cr.Rules, "ipam.example.com", "nodepools") {
		t.Errorf("a source of one's own: no read of its resource: %+v", cr.Rules)
	}
	if rules := get[*rbacv1.Role](t, r, objectKey("Role", "ipam", "capscale:controller:capacity-sources")).Rules; !reads(rules, "", "configmaps") || len(rules) != 1 {
		t.Errorf("a namespaced source of one's own: Role rules %+v", rules)
	}
	if len(cr.Rules) != 5 { // nodes, ciliumnodes, nodeslicepools, ippools, nodepools
		t.Errorf("ClusterRole rules %+v, want nodes, ciliumnodes.cilium.io, nodeslicepools and ippools.whereabouts.cni.cncf.io and nodepools.ipam.example.com", cr.Rules)
	}
	cm := get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-capacity-sources"))
	if f, err := capacitysource.Decode([]byte(cm.Data["sources.yaml"])); err != nil {
		t.Fatal(err)
	} else if _, err := f.Compile(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ name, values, want string }{
		{"unknown preset", "controller: {capacitySources: {enabled: true, sources: [{name: a, preset: calico}]}}", "preset"},
		{"no name", "controller: {capacitySources: {enabled: true, sources: [{preset: cilium-eni}]}}", "name"},
		{"neither preset nor resource", "controller: {capacitySources: {enabled: true, sources: [{name: a, node: x}]}}", "sources/0"},
		{"unknown field", "controller: {capacitySources: {enabled: true, sources: [{name: a, preset: cilium-eni, capcity: x}]}}", "capcity"},
	} {
		if _, err := helmTemplate(t, "-f", writeValues(t, tc.values)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a schema error naming %s", tc.name, err, tc.want)
		}
	}
}

// kustomizeCapacitySources renders deploy/ with its capacity-sources
// component, as an operator would turn it on.
func kustomizeCapacitySources(t *testing.T) rendered {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(repoRoot(t), "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	k := "resources:\n- " + rel + "\ncomponents:\n- " + filepath.Join(rel, "capacity-sources") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	return kustomize(t, dir)
}
