package deploy

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestHelmSchedulerConfigRolls: kube-scheduler reads its configuration only
// at start, so a `helm upgrade` that changes capscale-scheduler's
// ConfigMap (here the plugin's defaultCapacity, or the extender's profile)
// must change its pod template too, or the running pods keep the old
// configuration; one that does not change it must leave the pods alone.
func TestHelmSchedulerConfigRolls(t *testing.T) {
	scheduler := objectKey("Deployment", "capscale-system", "capscale-scheduler")
	config := objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config")
	for _, mode := range []string{"plugin", "extender", "native"} {
		render := func(capacity int) (string, string) {
			r, err := helmTemplate(t, "-f", writeValues(t, fmt.Sprintf("extender: {mode: %s, defaultCapacity: %d}", mode, capacity)))
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			d := get[*appsv1.Deployment](t, r, scheduler)
			return get[*corev1.ConfigMap](t, r, config).Data["config.yaml"], d.Spec.Template.Annotations["capscale.io/scheduler-config-checksum"]
		}
		cfg10, sum10 := render(10)
		cfgAgain, sumAgain := render(10)
		cfg20, sum20 := render(20)
		if sum10 == "" {
			t.Fatalf("%s: the scheduler's pods carry no configuration checksum", mode)
		}
		if cfg10 != cfgAgain || sum10 != sumAgain {
			t.Errorf("%s: the same values rendered a different configuration or checksum: %s / %s", mode, sum10, sumAgain)
		}
		if (cfg10 != cfg20) != (sum10 != sum20) {
			t.Errorf("%s: the configuration changed %v but the pods' checksum changed %v", mode, cfg10 != cfg20, sum10 != sum20)
		}
		if mode == "plugin" && cfg10 == cfg20 {
			t.Errorf("plugin: defaultCapacity 10 and 20 render the same configuration:\n%s", cfg10)
		}
	}
}
