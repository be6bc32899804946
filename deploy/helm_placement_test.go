package deploy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/metricsadapter/config"
)

// chartComponent is one Deployment of the chart: the values key it is
// configured under and the container its extra* values go to.
type chartComponent struct{ values, deployment, container string }

var chartComponents = []chartComponent{
	{"extender", "capscale-scheduler", "extender"},
	{"metricsAdapter", "capscale-metrics-adapter", "metrics-adapter"},
	{"workloadAPI", "capscale-workload-api", "workload-api"},
	{"controller", "capscale-controller", "controller"},
}

func deployment(t *testing.T, r rendered, name string) *appsv1.Deployment {
	t.Helper()
	return get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", name))
}

// TestHelmSecureByDefault: every pod the chart renders runs as 65532, not
// root, under the runtime's seccomp profile; every container (kube-scheduler
// and capscale-scheduler too) on a read-only root, with no capability and no
// privilege escalation, in every mode. podSecurityContext and
// securityContext reach every pod and container, merged into the defaults
// (null drops a key).
func TestHelmSecureByDefault(t *testing.T) {
	for _, mode := range []string{"extender", "native", "plugin"} {
		t.Run(mode, func(t *testing.T) {
			r, err := helmTemplate(t, "--set", "extender.mode="+mode)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range chartComponents {
				spec := deployment(t, r, c.deployment).Spec.Template.Spec
				p := spec.SecurityContext
				if p == nil || p.RunAsNonRoot == nil || !*p.RunAsNonRoot || p.RunAsUser == nil || *p.RunAsUser != 65532 ||
					p.RunAsGroup == nil || *p.RunAsGroup != 65532 || p.SeccompProfile == nil || p.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("%s: pod securityContext %+v", c.deployment, p)
				}
				for _, ctr := range spec.Containers {
					s := ctr.SecurityContext
					if s == nil || s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem || s.AllowPrivilegeEscalation == nil ||
						*s.AllowPrivilegeEscalation || s.Capabilities == nil || !reflect.DeepEqual(s.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
						len(s.Capabilities.Add) > 0 || s.Privileged != nil && *s.Privileged {
						t.Errorf("%s/%s: securityContext %+v", c.deployment, ctr.Name, s)
					}
				}
			}
		})
	}
	t.Run("set", func(t *testing.T) {
		r, err := helmTemplate(t, "-f", writeValues(t, `
podSecurityContext: {runAsUser: 1000, fsGroup: 2000, seccompProfile: null}
securityContext: {runAsUser: 1001}
`))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chartComponents {
			spec := deployment(t, r, c.deployment).Spec.Template.Spec
			if p := spec.SecurityContext; p == nil || *p.RunAsUser != 1000 || p.FSGroup == nil || *p.FSGroup != 2000 || p.SeccompProfile != nil ||
				p.RunAsGroup == nil || *p.RunAsGroup != 65532 || p.RunAsNonRoot == nil || !*p.RunAsNonRoot {
				t.Errorf("%s: pod securityContext %+v, want the value merged into the default", c.deployment, p)
			}
			for _, ctr := range spec.Containers {
				if s := ctr.SecurityContext; s == nil || s.RunAsUser == nil || *s.RunAsUser != 1001 || s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem {
					t.Errorf("%s/%s: securityContext %+v", c.deployment, ctr.Name, s)
				}
			}
		}
	})
}

// TestHelmPodMetadata: podAnnotations and podLabels reach every pod
// template and leave the selectors alone; the controller keeps its own
// checksum annotation beside them.
func TestHelmPodMetadata(t *testing.T) {
	r, err := helmTemplate(t, "-f", writeValues(t, `
podAnnotations: {example.com/owner: team-a}
podLabels: {team: a}
controller: {capacitySources: {enabled: true}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chartComponents {
		d := deployment(t, r, c.deployment)
		m := d.Spec.Template.ObjectMeta
		if m.Annotations["example.com/owner"] != "team-a" || m.Labels["team"] != "a" || m.Labels["app.kubernetes.io/name"] != c.deployment {
			t.Errorf("%s: pod labels %v, annotations %v", c.deployment, m.Labels, m.Annotations)
		}
		if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, map[string]string{"app.kubernetes.io/name": c.deployment}) {
			t.Errorf("%s: selector %v changed", c.deployment, d.Spec.Selector.MatchLabels)
		}
		if _, ok := d.Labels["team"]; ok {
			t.Errorf("%s: podLabels reach the Deployment itself", c.deployment)
		}
	}
	if m := deployment(t, r, "capscale-controller").Spec.Template.Annotations; m["capscale.io/capacity-sources-checksum"] == "" {
		t.Errorf("controller pod annotations %v lack the sources' checksum", m)
	}
	// The selector's label is the chart's: set in podLabels it would make
	// each Deployment's selector miss its pods.
	if _, err := helmTemplate(t, "--set", "podLabels.app\\.kubernetes\\.io/name=x"); err == nil ||
		!strings.Contains(err.Error(), "podLabels: app.kubernetes.io/name is the chart's own label") {
		t.Errorf("podLabels with app.kubernetes.io/name: %v, want a refusal naming the label", err)
	}
}

// TestHelmPlacement: each component's affinity replaces the default spread
// over nodes; its topologySpreadConstraints select its own pods unless they
// say otherwise; nodeSelector and tolerations reach its pods (the workload
// API's too).
func TestHelmPlacement(t *testing.T) {
	var values strings.Builder
	for _, c := range chartComponents {
		fmt.Fprintf(&values, `%s:
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [%s]}]}]}}}
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
  - {maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {team: a}}}
  nodeSelector: {pool: %s}
  tolerations: [{key: %s, operator: Exists, effect: NoSchedule}]
`, c.values, c.values, c.values, c.values)
	}
	r, err := helmTemplate(t, "-f", writeValues(t, values.String()))
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chartComponents {
		spec := deployment(t, r, c.deployment).Spec.Template.Spec
		if a := spec.Affinity; a == nil || a.PodAntiAffinity != nil || a.NodeAffinity == nil ||
			a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != c.values {
			t.Errorf("%s: affinity %+v, want exactly the value", c.deployment, a)
		}
		tsc := spec.TopologySpreadConstraints
		if len(tsc) != 2 || tsc[0].LabelSelector == nil || !reflect.DeepEqual(tsc[0].LabelSelector.MatchLabels, map[string]string{"app.kubernetes.io/name": c.deployment}) ||
			tsc[1].LabelSelector == nil || !reflect.DeepEqual(tsc[1].LabelSelector.MatchLabels, map[string]string{"team": "a"}) || tsc[1].MaxSkew != 2 {
			t.Errorf("%s: topologySpreadConstraints %+v", c.deployment, tsc)
		}
		if spec.NodeSelector["pool"] != c.values || len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != c.values {
			t.Errorf("%s: nodeSelector %v, tolerations %v", c.deployment, spec.NodeSelector, spec.Tolerations)
		}
		// By default: replicas preferably on distinct nodes, nothing else.
		def := deployment(t, defaults, c.deployment).Spec.Template.Spec
		if a := def.Affinity; a == nil || a.PodAntiAffinity == nil || a.NodeAffinity != nil || len(def.TopologySpreadConstraints) > 0 || len(def.NodeSelector) > 0 {
			t.Errorf("%s by default: affinity %+v, spread %v, nodeSelector %v", c.deployment, a, def.TopologySpreadConstraints, def.NodeSelector)
		}
	}
}

// TestHelmExtras: extraArgs, extraEnv and extraVolumeMounts reach the
// component's container, after the chart's flags; extraVolumes its pod. The
// adapter can so read a source's tls.caFile and bearerTokenFile from a
// mounted Secret.
func TestHelmExtras(t *testing.T) {
	values := map[string]any{}
	for _, c := range chartComponents {
		n := strings.ToLower(c.values)
		values[c.values] = map[string]any{
			"extraArgs":         []string{"--example-" + n + "=1"},
			"extraEnv":          []any{map[string]any{"name": "EXAMPLE", "value": n}},
			"extraVolumes":      []any{map[string]any{"name": "extra-" + n, "secret": map[string]any{"secretName": "extra"}}},
			"extraVolumeMounts": []any{map[string]any{"name": "extra-" + n, "mountPath": "/etc/extra", "readOnly": true}},
		}
	}
	values["extender"].(map[string]any)["kubeScheduler"] = kubeSchedulerExtras
	values["metricsAdapter"].(map[string]any)["config"] = map[string]any{"sources": []any{map[string]any{
		"name": "backend", "url": "https://backend.example/load", "jsonPath": "{.load}", "interval": "30s", "timeout": "5s", "maxAge": "2m",
		"tls": map[string]any{"caFile": "/etc/extra/ca.crt"}, "bearerTokenFile": "/etc/extra/token",
	}}}
	v, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	r, err := helmTemplate(t, "--set", "extender.mode=extender", "-f", writeValues(t, string(v)))
	if err != nil {
		t.Fatal(err)
	}
	check := func(d *appsv1.Deployment, ctrName, flag, env, volume, mountPath string) {
		t.Helper()
		ctr := container(t, d, ctrName)
		if ctr.Command[len(ctr.Command)-1] != flag {
			t.Errorf("%s/%s: command %v does not end with %s", d.Name, ctrName, ctr.Command, flag)
		}
		if !slices.Contains(ctr.Env, corev1.EnvVar{Name: "EXAMPLE", Value: env}) {
			t.Errorf("%s/%s: env %v", d.Name, ctrName, ctr.Env)
		}
		if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume && m.MountPath == mountPath }) {
			t.Errorf("%s/%s: mounts %v lack %s at %s", d.Name, ctrName, ctr.VolumeMounts, volume, mountPath)
		}
		if vol := volumeOf(d, volume); vol == nil || vol.Secret == nil || vol.Secret.SecretName != "extra" {
			t.Errorf("%s: volume %s is %+v", d.Name, volume, vol)
		}
	}
	for _, c := range chartComponents {
		n := strings.ToLower(c.values)
		check(deployment(t, r, c.deployment), c.container, "--example-"+n+"=1", n, "extra-"+n, "/etc/extra")
	}
	check(deployment(t, r, "capscale-scheduler"), "kube-scheduler", "--example-kube-scheduler=1", "kube-scheduler", "extra-extender", "/etc/ks")
	// The files the adapter's configuration names are on a mount.
	cfg, err := config.Decode([]byte(get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-metrics-adapter-config")).Data["config.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	mounts := container(t, deployment(t, r, "capscale-metrics-adapter"), "metrics-adapter").VolumeMounts
	for _, f := range []string{cfg.Sources[0].TLS.CAFile, cfg.Sources[0].BearerTokenFile} {
		if !slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool {
			return strings.HasPrefix(f, m.MountPath+"/") && m.Name == "extra-metricsadapter"
		}) {
			t.Errorf("the adapter's %s is on no extra mount: %v", f, mounts)
		}
	}

	// Plugin mode: kubeScheduler's reach capscale-scheduler; the extender's
	// have no container to go to and fail the render.
	pv, _ := yaml.Marshal(map[string]any{"extender": map[string]any{
		"extraVolumes":  []any{map[string]any{"name": "extra-extender", "secret": map[string]any{"secretName": "extra"}}},
		"kubeScheduler": kubeSchedulerExtras,
	}})
	plugin, err := helmTemplate(t, "--set", "extender.mode=plugin", "-f", writeValues(t, string(pv)))
	if err != nil {
		t.Fatal(err)
	}
	check(deployment(t, plugin, "capscale-scheduler"), "kube-scheduler", "--example-kube-scheduler=1", "kube-scheduler", "extra-extender", "/etc/ks")
	_, err = helmTemplate(t, "--set", "extender.mode=plugin", "--set", "extender.extraArgs[0]=--example=1")
	if err == nil || !strings.Contains(err.Error(), "plugin mode does not run") {
		t.Errorf("plugin mode with extender.extraArgs: %v, want a refusal naming extender.kubeScheduler", err)
	}
}

// kubeSchedulerExtras are extender.kubeScheduler's extra values: the
// scheduler container's, mounting the extender's extra volume.
var kubeSchedulerExtras = map[string]any{
	"extraArgs":         []string{"--example-kube-scheduler=1"},
	"extraEnv":          []any{map[string]any{"name": "EXAMPLE", "value": "kube-scheduler"}},
	"extraVolumeMounts": []any{map[string]any{"name": "extra-extender", "mountPath": "/etc/ks"}},
}

func volumeOf(d *appsv1.Deployment, name string) *corev1.Volume {
	for i := range d.Spec.Template.Spec.Volumes {
		if d.Spec.Template.Spec.Volumes[i].Name == name {
			return &d.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

// TestHelmPodDisruptionBudgets: every component of more than one replica
// has a PodDisruptionBudget that keeps one of its pods, and selects exactly
// its pods; one replica has none (it would block every drain).
func TestHelmPodDisruptionBudgets(t *testing.T) {
	for _, mode := range []string{"extender", "plugin"} {
		r, err := helmTemplate(t, "--set", "extender.mode="+mode)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chartComponents {
			d := deployment(t, r, c.deployment)
			pdb := get[*policyv1.PodDisruptionBudget](t, r, objectKey("PodDisruptionBudget", "capscale-system", c.deployment))
			if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.MaxUnavailable != nil ||
				!reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("%s mode: PodDisruptionBudget %s: %+v", mode, c.deployment, pdb.Spec)
			}
		}
	}
	one, err := helmTemplate(t, "-f", writeValues(t, "extender: {replicas: 1}\nmetricsAdapter: {replicas: 1}\nworkloadAPI: {replicas: 1}\ncontroller: {replicas: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range one.keys() {
		if strings.HasPrefix(k, "PodDisruptionBudget ") {
			t.Errorf("one replica each, yet %s is rendered", k)
		}
	}
}

// TestHelmPluginSchedulerResources: plugin mode's capscale-scheduler is
// sized by extender.pluginScheduler.resources, not by the stock
// kube-scheduler's.
func TestHelmPluginSchedulerResources(t *testing.T) {
	r, err := helmTemplate(t, "--set", "extender.mode=plugin", "-f", writeValues(t, `
extender:
  kubeScheduler: {resources: {requests: {cpu: 1m}}}
  pluginScheduler: {resources: {requests: {cpu: 300m, memory: 200Mi}, limits: {memory: 1Gi}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	res := container(t, deployment(t, r, "capscale-scheduler"), "kube-scheduler").Resources
	b, _ := yaml.Marshal(res)
	if res.Requests.Cpu().String() != "300m" || res.Requests.Memory().String() != "200Mi" || res.Limits.Memory().String() != "1Gi" {
		t.Errorf("capscale-scheduler resources:\n%s", b)
	}
}
