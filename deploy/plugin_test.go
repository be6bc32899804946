package deploy

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedv1 "k8s.io/kube-scheduler/config/v1"

	"github.com/capscale/capscale/internal/names"
)

// defaultScoreWeights is the sum of the weights of kube-scheduler v1.37's
// default score plugins (TaintToleration 3, NodeAffinity 2,
// NodeResourcesFit 1, PodTopologySpread 2, InterPodAffinity 2,
// NodeResourcesBalancedAllocation 1, ImageLocality 1, VolumeBinding 1).
// UnderlayIP scores 100 or 0, so its weight must exceed this for "most free
// IPs first" to be exact.
const defaultScoreWeights = 13

// pluginManifest is deploy/plugin/capscale-scheduler.yaml, decoded.
func pluginManifest(t *testing.T) rendered {
	t.Helper()
	return decodeRender(t, string(mustRead(t, "plugin/capscale-scheduler.yaml")))
}

// checkPluginProfiles: every profile enables UnderlayIP with a weight that
// dominates the other scores and its args, NodeResourcesFit ignores the
// resource, and there is no extender; only the capscale-scheduler profile
// scores every node.
func checkPluginProfiles(t *testing.T, name string, cfg *schedv1.KubeSchedulerConfiguration) {
	t.Helper()
	if len(cfg.Extenders) != 0 {
		t.Errorf("%s: plugin mode calls an extender: %+v", name, cfg.Extenders)
	}
	if len(cfg.Profiles) == 0 {
		t.Fatalf("%s: no profiles", name)
	}
	for _, p := range cfg.Profiles {
		pname := *p.SchedulerName
		var weight int32
		if p.Plugins != nil {
			for _, pl := range p.Plugins.MultiPoint.Enabled {
				if pl.Name == "UnderlayIP" && pl.Weight != nil {
					weight = *pl.Weight
				}
			}
		}
		if weight <= defaultScoreWeights {
			t.Errorf("%s: profile %s: UnderlayIP weight %d (absent: 0) must exceed %d", name, pname, weight, defaultScoreWeights)
		}
		args := map[string]string{}
		for _, pc := range p.PluginConfig {
			args[pc.Name] = string(pc.Args.Raw)
		}
		if !strings.Contains(args["UnderlayIP"], `"defaultCapacity":10`) {
			t.Errorf("%s: profile %s: UnderlayIP args %q lack defaultCapacity 10", name, pname, args["UnderlayIP"])
		}
		if !strings.Contains(args["NodeResourcesFit"], `"ignoredResources":["`+names.UnderlayIPResource+`"]`) {
			t.Errorf("%s: profile %s: NodeResourcesFit args %q must ignore %s", name, pname, args["NodeResourcesFit"], names.UnderlayIPResource)
		}
		if all := p.PercentageOfNodesToScore != nil && *p.PercentageOfNodesToScore == 100; all != (pname == "capscale-scheduler") {
			t.Errorf("%s: profile %s: percentageOfNodesToScore %v; only capscale-scheduler scores every node", name, pname, p.PercentageOfNodesToScore)
		}
	}
	if cfg.PercentageOfNodesToScore != nil {
		t.Errorf("%s: a global percentageOfNodesToScore taxes every pod", name)
	}
}

// TestPluginSchedulerConfig: the configuration the e2e suite and local-up
// run and the one the plugin-mode manifest deploys agree, and both enable
// the plugin in every profile.
func TestPluginSchedulerConfig(t *testing.T) {
	tested := schedulerConfig(t, mustRead(t, "plugin/kube-scheduler-config.yaml"))
	checkPluginProfiles(t, "plugin/kube-scheduler-config.yaml", tested)
	cm := get[*corev1.ConfigMap](t, pluginManifest(t), objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config"))
	deployed := schedulerConfig(t, []byte(cm.Data["config.yaml"]))
	checkPluginProfiles(t, "plugin/capscale-scheduler.yaml", deployed)
	if len(deployed.Profiles) != 1 || *deployed.Profiles[0].SchedulerName != "capscale-scheduler" {
		t.Fatalf("the second scheduler must have the one profile capscale-scheduler: %+v", deployed.Profiles)
	}
	var e2e schedv1.KubeSchedulerProfile
	for _, p := range tested.Profiles {
		if *p.SchedulerName == "capscale-scheduler" {
			e2e = p
		}
	}
	if !reflect.DeepEqual(e2e, deployed.Profiles[0]) {
		t.Errorf("profile capscale-scheduler differs:\n e2e:      %+v\n deployed: %+v", e2e, deployed.Profiles[0])
	}
	le := deployed.LeaderElection
	if le.LeaderElect == nil || !*le.LeaderElect || le.ResourceName != "capscale-scheduler" || le.ResourceNamespace != "capscale-system" {
		t.Errorf("leader election %+v: want the Lease capscale-system/capscale-scheduler", le)
	}
}

// TestPluginRBAC: plugin mode grants kube-scheduler's roles and nothing
// more: no ClusterRole of its own, the two upstream bindings, the Lease.
func TestPluginRBAC(t *testing.T) {
	r := pluginManifest(t)
	for _, k := range r.keys() {
		switch kind := r[k].raw["kind"]; kind {
		case "ClusterRole":
			t.Errorf("%s: plugin mode needs no ClusterRole of its own", k)
		case "ClusterRoleBinding":
			role := get[*rbacv1.ClusterRoleBinding](t, r, k).RoleRef.Name
			if role != "system:kube-scheduler" && role != "system:volume-scheduler" {
				t.Errorf("%s binds %s", k, role)
			}
		case "Role":
			rules := get[*rbacv1.Role](t, r, k).Rules
			want := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
				ResourceNames: []string{"capscale-scheduler"}, Verbs: []string{"get", "update"}}}
			if !reflect.DeepEqual(rules, want) {
				t.Errorf("%s: rules %+v, want only the Lease", k, rules)
			}
		}
	}
	d := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 || len(cs[0].Command) == 0 || cs[0].Command[0] != "/capscale-scheduler" {
		t.Fatalf("plugin mode runs capscale-scheduler alone, no sidecar: %+v", cs)
	}
	if !slices.ContainsFunc(cs[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == 10259 }) {
		t.Errorf("no metrics port 10259: %+v", cs[0].Ports)
	}
}

// extenderModeScheduler is what plugin mode replaces: extender mode's
// scheduler and the extender's RBAC.
func extenderModeScheduler(t *testing.T) rendered {
	t.Helper()
	var b bytes.Buffer
	for _, f := range []string{"scheduler/capscale-scheduler.yaml", "extender/rbac.yaml"} {
		b.Write(mustRead(t, f))
		b.WriteString("\n---\n")
	}
	return decodeRender(t, b.String())
}

// TestHelmPluginMode: by default (plugin mode) the chart renders what
// kustomize renders of deploy/ with plugin/capscale-scheduler.yaml in place
// of extender mode's scheduler and the extender's RBAC (the swap
// deploy/kustomization.yaml describes), object for object, except for the
// labels Helm adds.
func TestHelmPluginMode(t *testing.T) {
	want := kustomize(t, "deploy")
	want.dropCRDs()
	for k := range extenderModeScheduler(t) {
		delete(want, k)
	}
	for k, o := range pluginManifest(t) {
		want[k] = o
	}
	// helm template leaves the APIService to the adapter (TestHelmRendersKustomize).
	delete(want, objectKey("APIService", "", "v1beta1.external.metrics.k8s.io"))
	got, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	compareToKustomize(t, want, got, "plugin mode")
}

// TestPluginModeInKustomization: the swap the kustomization's comment
// describes names files that exist.
func TestPluginModeInKustomization(t *testing.T) {
	k := string(mustRead(t, "kustomization.yaml"))
	for _, f := range []string{"plugin/capscale-scheduler.yaml", "- extender/rbac.yaml", "- scheduler/capscale-scheduler.yaml"} {
		if !strings.Contains(k, f) {
			t.Errorf("kustomization.yaml does not mention %s", f)
		}
	}
	for _, f := range []string{"plugin/capscale-scheduler.yaml", "extender/rbac.yaml", "scheduler/capscale-scheduler.yaml"} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}
}
