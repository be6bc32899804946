package deploy

import (
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestHelmExtenderReads: in extender mode controller.capacitySources.schedulerReads:
// true (auto stays off there) gives capscale-scheduler's extender
// --capacity-sources, which the extender's own options accept beside the
// chart's other flags; the file it names is the sources ConfigMap, mounted
// in the extender only; its pods roll when the sources change;
// capscale-scheduler may read each source's resource and nothing more; and
// the controller still mirrors, its Node writes held to 10 a second after
// its first pass, as in plugin mode.
func TestHelmExtenderReads(t *testing.T) {
	values := strings.Replace(strings.Replace(publisherReadsValues, "%s", "schedulerReads: true,", 1), "mode: native", "mode: extender", 1)
	r, err := helmTemplate(t, "-f", writeValues(t, values))
	if err != nil {
		t.Fatal(err)
	}
	d := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
	ext := container(t, d, "extender")
	file := flagValue(ext.Command, "--capacity-sources")
	if file == "" || slices.Contains(ext.Command, "--publish-capacity") {
		t.Fatalf("the extender's flags %v: want --capacity-sources and no publisher", ext.Command)
	}
	mounted := slices.ContainsFunc(ext.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "capacity-sources" && m.ReadOnly && path.Join(m.MountPath, "sources.yaml") == file
	})
	if v := volume(d, "capacity-sources"); !mounted || v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "capscale-capacity-sources" {
		t.Errorf("the extender's --capacity-sources=%q is not the mounted ConfigMap's sources.yaml: mounts %+v, volume %+v", file, ext.VolumeMounts, v)
	}
	if slices.ContainsFunc(container(t, d, "kube-scheduler").VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "capacity-sources" }) {
		t.Error("kube-scheduler mounts the sources: only the extender reads them in extender mode")
	}
	if _, rolls := d.Spec.Template.Annotations["capscale.io/capacity-sources-checksum"]; !rolls {
		t.Error("the scheduler's pods carry no sources checksum: a change of the sources would not reach the extender")
	}
	if cfg := get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config")).Data["config.yaml"]; strings.Contains(cfg, "capacitySources") {
		t.Errorf("kube-scheduler's configuration names the sources:\n%s", cfg)
	}
	cm := get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-capacity-sources"))
	if errs := parseExtender(t, ext.Command, file, cm.Data["sources.yaml"]).Validate(); len(errs) > 0 {
		t.Errorf("the extender refuses the chart's flags %v: %v", ext.Command, errs)
	}
	checkSchedulerReadsRBAC(t, r)
	ctrl := container(t, get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-controller")), "controller")
	if !slices.Contains(ctrl.Command, capacitySourcesFlag) || !slices.Contains(ctrl.Command, "--capacity-source-qps=10") {
		t.Errorf("the controller's flags %v: want the mirror, at 10 Node writes a second", ctrl.Command)
	}
}
