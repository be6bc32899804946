package deploy

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	extenderapp "github.com/capscale/capscale/cmd/extender/app"
)

// publisherReadsValues are native mode with a cluster-wide source and a
// namespaced one; %s is where a test sets publisherReads.
const publisherReadsValues = "extender: {mode: native}\n" +
	"controller: {capacitySources: {enabled: true, %s sources: [" +
	"{name: cilium, preset: cilium-eni}, " +
	"{name: mine, resource: {group: ipam.example.com, version: v1, resource: nodepools}, namespace: ipam, node: object.metadata.name, capacity: '1', draws: marked}]}}"

// TestHelmPublisherReads: with controller.capacitySources.publisherReads,
// native mode's extender gets --capacity-sources, which the extender's own
// options accept beside the chart's other flags; the file it names is the
// sources ConfigMap, mounted there; its pods roll when the sources change;
// capscale-scheduler may read each source's resource (a namespaced one in
// its namespace) and nothing more; and the controller, which mirrors
// nothing then, gets no flag, no file and no RBAC on the Nodes or the
// sources. The default (auto) is on in native mode; with false, none of it
// and the controller mirrors as before.
func TestHelmPublisherReads(t *testing.T) {
	scheduler := objectKey("Deployment", "capscale-system", "capscale-scheduler")
	controller := objectKey("Deployment", "capscale-system", "capscale-controller")
	for _, c := range []struct {
		value string
		on    bool
	}{{"publisherReads: true,", true}, {"", true}, {"publisherReads: auto,", true}, {"publisherReads: false,", false}} {
		on := c.on
		r, err := helmTemplate(t, "-f", writeValues(t, strings.Replace(publisherReadsValues, "%s", c.value, 1)))
		if err != nil {
			t.Fatalf("%q: %v", c.value, err)
		}
		d := get[*appsv1.Deployment](t, r, scheduler)
		ext := container(t, d, "extender")
		file := flagValue(ext.Command, "--capacity-sources")
		_, rolls := d.Spec.Template.Annotations["capscale.io/capacity-sources-checksum"]
		_, crOK := r[objectKey("ClusterRole", "", "capscale:scheduler:capacity-sources")]
		_, rbOK := r[objectKey("RoleBinding", "ipam", "capscale:scheduler:capacity-sources")]
		ctrlDeploy := get[*appsv1.Deployment](t, r, controller)
		ctrl := container(t, ctrlDeploy, "controller")
		mirrors := slices.Contains(ctrl.Command, capacitySourcesFlag)
		_, ctrlRolls := ctrlDeploy.Spec.Template.Annotations["capscale.io/capacity-sources-checksum"]
		controllerRBAC := []string{
			objectKey("ClusterRole", "", "capscale:controller:capacity-sources"),
			objectKey("ClusterRoleBinding", "", "capscale:controller:capacity-sources"),
			objectKey("RoleBinding", "ipam", "capscale:controller:capacity-sources"),
		}
		if !on {
			if file != "" || volume(d, "capacity-sources") != nil || rolls || crOK || rbOK {
				t.Errorf("publisherReads false: the publisher reads the sources (args %v, volume %v, checksum %v, ClusterRole %v, RoleBinding %v)",
					ext.Command, volume(d, "capacity-sources") != nil, rolls, crOK, rbOK)
			}
			if !mirrors || volume(ctrlDeploy, "capacity-sources") == nil || !ctrlRolls {
				t.Errorf("publisherReads false: the controller does not mirror as before (args %v, volume %v, checksum %v)",
					ctrl.Command, volume(ctrlDeploy, "capacity-sources") != nil, ctrlRolls)
			}
			for _, k := range controllerRBAC {
				if _, ok := r[k]; !ok {
					t.Errorf("publisherReads false: the mirror lacks %s", k)
				}
			}
			continue
		}

		// The publisher reads the mounted sources, and the extender starts
		// with the chart's flags (it refuses --capacity-sources without
		// --publish-capacity and --await-capacity-source).
		v := volume(d, "capacity-sources")
		if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "capscale-capacity-sources" {
			t.Fatalf("the scheduler mounts no capscale-capacity-sources: %+v", v)
		}
		mounted := slices.ContainsFunc(ext.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "capacity-sources" && m.ReadOnly && path.Join(m.MountPath, "sources.yaml") == file
		})
		if !mounted {
			t.Errorf("the extender's --capacity-sources=%q is not the mounted ConfigMap's sources.yaml: %+v", file, ext.VolumeMounts)
		}
		if slices.ContainsFunc(container(t, d, "kube-scheduler").VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "capacity-sources" }) {
			t.Error("kube-scheduler mounts the sources: only the extender reads them in native mode")
		}
		if !rolls {
			t.Error("the scheduler's pods carry no sources checksum: a change of the sources would not reach the publisher")
		}
		cm := get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-capacity-sources"))
		if errs := parseExtender(t, ext.Command, file, cm.Data["sources.yaml"]).Validate(); len(errs) > 0 {
			t.Errorf("the extender refuses the chart's flags %v: %v", ext.Command, errs)
		}

		// capscale-scheduler reads the sources, and only them.
		checkSchedulerReadsRBAC(t, r)

		// The controller mirrors nothing: no flag, file or checksum, and
		// none of the mirror's RBAC (it would patch every Node).
		if mirrors || volume(ctrlDeploy, "capacity-sources") != nil || len(ctrl.VolumeMounts) > 0 || ctrlRolls {
			t.Errorf("the controller still mirrors (args %v, volume %v, mounts %v, checksum %v)",
				ctrl.Command, volume(ctrlDeploy, "capacity-sources") != nil, ctrl.VolumeMounts, ctrlRolls)
		}
		for _, k := range controllerRBAC {
			if _, ok := r[k]; ok {
				t.Errorf("the chart renders %s though the controller mirrors nothing", k)
			}
		}
	}
}

// TestHelmPublisherReadsExtraMounts: extender.extraVolumeMounts still
// reach the extender beside the sources' mount.
func TestHelmPublisherReadsExtraMounts(t *testing.T) {
	values := strings.Replace(publisherReadsValues, "%s", "", 1)
	values = strings.Replace(values, "extender: {mode: native}",
		"extender: {mode: native, extraVolumes: [{name: extra, emptyDir: {}}], extraVolumeMounts: [{name: extra, mountPath: /extra}]}", 1)
	r, err := helmTemplate(t, "-f", writeValues(t, values))
	if err != nil {
		t.Fatal(err)
	}
	d := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
	var names []string
	for _, m := range container(t, d, "extender").VolumeMounts {
		names = append(names, m.Name)
	}
	if !slices.Equal(names, []string{"capacity-sources", "extra"}) {
		t.Errorf("the extender mounts %v, want capacity-sources and extra", names)
	}
	if volume(d, "capacity-sources") == nil || volume(d, "extra") == nil {
		t.Errorf("the pod's volumes %+v, want capacity-sources and extra", d.Spec.Template.Spec.Volumes)
	}
}

// TestHelmPublisherReadsAuto: the default, auto, is off where the
// publisher cannot read the sources (plugin and extender modes, no wait
// for the mirror, no scheduler), and the controller mirrors as before;
// only an explicit true is refused there (next test).
func TestHelmPublisherReadsAuto(t *testing.T) {
	for name, values := range map[string]string{
		"plugin mode":               "extender: {mode: plugin}\ncontroller: {capacitySources: {enabled: true}}",
		"extender mode":             "extender: {mode: extender}\ncontroller: {capacitySources: {enabled: true}}",
		"extender mode, publishing": "extender: {mode: extender, publishCapacity: true}\ncontroller: {capacitySources: {enabled: true}}",
		"native mode, no wait":      "extender: {mode: native}\ncontroller: {capacitySources: {enabled: true, awaitMirror: false}}",
		"native mode, no scheduler": "extender: {mode: native}\nscheduler: {enabled: false}\ncontroller: {capacitySources: {enabled: true}}",
	} {
		r, err := helmTemplate(t, "-f", writeValues(t, values))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if key := objectKey("Deployment", "capscale-system", "capscale-scheduler"); r[key].raw != nil {
			d := get[*appsv1.Deployment](t, r, key)
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Name == "extender" && flagValue(c.Command, "--capacity-sources") != "" {
					t.Errorf("%s: the extender reads the sources: %v", name, c.Command)
				}
			}
		}
		ctrl := container(t, get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-controller")), "controller")
		if !slices.Contains(ctrl.Command, capacitySourcesFlag) {
			t.Errorf("%s: the controller does not mirror: %v", name, ctrl.Command)
		}
		if _, ok := r[objectKey("ClusterRoleBinding", "", "capscale:controller:capacity-sources")]; !ok {
			t.Errorf("%s: the mirror has no RBAC", name)
		}
	}
	// No sources: nothing reads them, and nothing is refused.
	r, err := helmTemplate(t, "-f", writeValues(t, "extender: {mode: native}\ncontroller: {capacitySources: {enabled: false, publisherReads: auto}}"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r[objectKey("ClusterRole", "", "capscale:scheduler:capacity-sources")]; ok {
		t.Error("no sources: capscale-scheduler may read them")
	}
}

// TestHelmPublisherReadsRefused: publisherReads outside native mode, or
// without the wait for the mirror it takes the place of, or without the
// publisher, fails the render with a message naming the value.
func TestHelmPublisherReadsRefused(t *testing.T) {
	for name, values := range map[string]string{
		"plugin mode":   "extender: {mode: plugin}\ncontroller: {capacitySources: {enabled: true, publisherReads: true}}",
		"extender mode": "extender: {mode: extender, publishCapacity: true}\ncontroller: {capacitySources: {enabled: true, publisherReads: true}}",
		"no wait":       "extender: {mode: native}\ncontroller: {capacitySources: {enabled: true, publisherReads: true, awaitMirror: false}}",
		"no sources":    "extender: {mode: native}\ncontroller: {capacitySources: {enabled: false, publisherReads: true}}",
		"no controller": "extender: {mode: native}\ncontroller: {enabled: false, capacitySources: {enabled: true, publisherReads: true}}",
		"no scheduler":  "extender: {mode: native}\nscheduler: {enabled: false}\ncontroller: {capacitySources: {enabled: true, publisherReads: true}}",
	} {
		_, err := helmTemplate(t, "-f", writeValues(t, values))
		if err == nil || !strings.Contains(err.Error(), "controller.capacitySources.publisherReads") {
			t.Errorf("%s: want a failure naming controller.capacitySources.publisherReads, got %v", name, err)
		}
	}
}

// parseExtender parses a chart's extender command as the binary does, with
// the file of its --capacity-sources (mounted in the pod) replaced by a
// local copy of sources, so that Validate loads what the pod would.
func parseExtender(t *testing.T, command []string, file, sources string) *extenderapp.Options {
	t.Helper()
	local := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(local, []byte(sources), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := slices.Clone(command[1:])
	for i, a := range argv {
		if a == "--capacity-sources="+file {
			argv[i] = "--capacity-sources=" + local
		}
	}
	o := extenderapp.NewOptions()
	fs := pflag.NewFlagSet("extender", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(argv); err != nil {
		t.Fatalf("the extender does not parse the chart's flags %v: %v", command, err)
	}
	return o
}

// TestPublisherReadsKustomize: deploy/ in native mode (extender mode with
// the component native) with the components capacity-sources and
// capacity-sources/publisher-reads renders what the chart renders by
// default in native mode with sources on: the scheduler's Deployment (but
// the chart's checksums, and the extender's flags in the order kustomize
// appends them), its RBAC to read the sources, and the controller's
// Deployment, which mirrors nothing; neither renders the mirror's RBAC.
func TestPublisherReadsKustomize(t *testing.T) {
	want, err := kustomizeMode(t, "extender", "capacity-sources", "native", "capacity-sources/publisher-reads")
	if err != nil {
		t.Fatal(err)
	}
	got, err := helmTemplate(t, "--set", "extender.mode=native", "--set", "controller.capacitySources.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	scheduler := objectKey("Deployment", "capscale-system", "capscale-scheduler")
	if c := container(t, get[*appsv1.Deployment](t, want, scheduler), "extender"); flagValue(c.Command, "--capacity-sources") == "" {
		t.Errorf("kustomize's extender reads no sources: %v", c.Command)
	}
	for _, key := range []string{
		scheduler,
		objectKey("Deployment", "capscale-system", "capscale-controller"),
		objectKey("ClusterRole", "", "capscale:scheduler:capacity-sources"),
		objectKey("ClusterRoleBinding", "", "capscale:scheduler:capacity-sources"),
	} {
		if key != scheduler {
			sameAsKustomize(t, want, got, key)
			continue
		}
		// Flags are unordered; kustomize can only append them.
		sameAsKustomize(t, want, got, key, func(m map[string]any) map[string]any { return withSortedCommand(t, m, "extender") })
	}
	for _, key := range []string{
		objectKey("ClusterRole", "", "capscale:controller:capacity-sources"),
		objectKey("ClusterRoleBinding", "", "capscale:controller:capacity-sources"),
	} {
		if _, ok := want[key]; ok {
			t.Errorf("deploy/ with the components renders %s", key)
		}
		if _, ok := got[key]; ok {
			t.Errorf("the chart renders %s", key)
		}
	}
}

// withSortedCommand returns a copy of the Deployment obj whose container
// name has its command sorted after the binary.
func withSortedCommand(t *testing.T, obj map[string]any, name string) map[string]any {
	t.Helper()
	var c map[string]any
	b, _ := json.Marshal(obj)
	_ = json.Unmarshal(b, &c)
	containers, _ := c["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
	for _, ct := range containers {
		m, _ := ct.(map[string]any)
		if m["name"] != name {
			continue
		}
		cmd, _ := m["command"].([]any)
		if len(cmd) < 2 {
			t.Fatalf("container %s has no flags: %v", name, cmd)
		}
		slices.SortFunc(cmd[1:], func(a, b any) int { return strings.Compare(a.(string), b.(string)) })
		return c
	}
	t.Fatalf("no container %s", name)
	return nil
}
