package deploy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/diff"
)

// TestDrawsAndAwaitMirror (issue 49 §2, §4): with capacity sources on, the
// chart and deploy/capacity-sources tell the extender and the workload API
// to wait for the mirror (the plugin's args too, in the chart), and render
// the same cluster-wide draws-all policies (the IP and capscale-scheduler)
// when a source draws all; a source that says draws: marked gets no such
// policy, and awaitMirror: false turns the wait off.
func TestDrawsAndAwaitMirror(t *testing.T) {
	const await = "--await-capacity-source"
	policy := objectKey("MutatingAdmissionPolicy", "", "capscale-draws-all-ip")
	routing := objectKey("MutatingAdmissionPolicy", "", "capscale-draws-all-scheduler")
	scheduler := objectKey("Deployment", "capscale-system", "capscale-scheduler")
	workload := objectKey("Deployment", "capscale-system", "capscale-workload-api")

	off, err := helmTemplate(t, "--set", "extender.mode=extender")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := off[policy]; ok {
		t.Error("the draws-all policy renders without capacity sources")
	}
	if slices.Contains(container(t, get[*appsv1.Deployment](t, off, scheduler), "extender").Command, await) {
		t.Error("the extender waits for a mirror that is off")
	}

	want := kustomizeCapacitySources(t)
	on, err := helmTemplate(t, "--set", "extender.mode=extender", "--set", "controller.capacitySources.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]rendered{"deploy/capacity-sources": want, "the chart": on} {
		if !slices.Contains(container(t, get[*appsv1.Deployment](t, r, scheduler), "extender").Command, await) {
			t.Errorf("%s: the extender does not wait for the mirror", name)
		}
		if !slices.Contains(container(t, get[*appsv1.Deployment](t, r, workload), "workload-api").Command, await) {
			t.Errorf("%s: the workload API does not wait for the mirror", name)
		}
	}
	// The IP and the move to capscale-scheduler, and their bindings: deploy/
	// runs capscale-scheduler as a second scheduler, as the chart does.
	for _, key := range []string{policy, routing, objectKey("MutatingAdmissionPolicyBinding", "", "capscale-draws-all-ip"), objectKey("MutatingAdmissionPolicyBinding", "", "capscale-draws-all-scheduler")} {
		w, ok := want[key]
		if !ok {
			t.Errorf("deploy/capacity-sources lacks %s", key)
			continue
		}
		g, ok := on[key]
		if !ok {
			t.Errorf("the chart with a preset source lacks %s", key)
			continue
		}
		if normalized := withoutHelmLabels(g.raw, labelsOf(w.raw)); !reflect.DeepEqual(normalized, w.raw) {
			t.Errorf("%s differs (- deploy, + chart):\n%s", key, diff.Diff(w.raw, normalized))
		}
	}

	marked, err := helmTemplate(t, "--set", "extender.mode=extender", "-f", writeValues(t, `controller:
  capacitySources:
    enabled: true
    awaitMirror: false
    sources:
    - {name: underlay, preset: cilium-multi-pool, draws: marked}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := marked[policy]; ok {
		t.Error("the draws-all policy renders for a source that draws marked pods only")
	}
	if slices.Contains(container(t, get[*appsv1.Deployment](t, marked, scheduler), "extender").Command, await) {
		t.Error("awaitMirror: false still waits")
	}
	plugin, err := helmTemplate(t, "--set", "controller.capacitySources.enabled=true", "--set", "extender.mode=plugin")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for key, r := range plugin {
		if strings.HasPrefix(key, "ConfigMap ") && strings.Contains(fmt.Sprint(r.raw), "awaitCapacitySource: true") {
			found = true
		}
	}
	if !found {
		t.Error("plugin mode: no awaitCapacitySource in the scheduler's configuration")
	}
}
