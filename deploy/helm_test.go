package deploy

import (
	"encoding/json"
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
	schedv1 "k8s.io/kube-scheduler/config/v1"

	"github.com/capscale/capscale/metricsadapter/config"
)

func TestHelmLint(t *testing.T) {
	if out, err := runDeployTool(t, "helm", "lint", "--strict", chartDir(t)); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := runDeployTool(t, "helm", "lint", "--strict", chartDir(t), "--namespace", "infra", "-f", writeValues(t, customValues)); err != nil {
		t.Fatalf("with custom values: %v\n%s", err, out)
	}
}

// helmAddedLabels are the labels the chart puts on every object on top of
// those of deploy/.
var helmAddedLabels = []string{
	"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
	"app.kubernetes.io/version", "app.kubernetes.io/part-of",
}

// TestHelmRendersKustomize: in extender mode (deploy/'s; the chart's
// default is plugin mode, TestHelmPluginMode) the chart renders exactly the
// objects of `kubectl kustomize deploy/`, and each object is equal field by
// field, except for the labels Helm adds.
func TestHelmRendersKustomize(t *testing.T) {
	want := kustomize(t, "deploy")
	want.dropCRDs()
	got, err := helmTemplate(t, "--set", "extender.mode=extender")
	if err != nil {
		t.Fatal(err)
	}
	// helm template cannot see the cluster, so it leaves the APIService to
	// the adapter (--register-apiservice), which registers it when none is
	// and leaves another adapter's alone: applied blindly, a rendered one
	// would take it from KEDA (issue 50). helm install renders it when the
	// lookup finds none (e2e TestHelmInstallOwnerCheck).
	apiKey := objectKey("APIService", "", "v1beta1.external.metrics.k8s.io")
	if _, ok := got[apiKey]; ok {
		t.Errorf("helm template renders %s, which it cannot know to be free", apiKey)
	}
	delete(want, apiKey)
	compareToKustomize(t, want, got, "deploy/")
}

// compareToKustomize checks that got (a chart render) has exactly want's
// objects (kustomize's, described by source) and each is equal field by
// field, but for Helm's standard labels, which every object carries; the
// scheduler's configuration is compared as decoded, not as text.
func compareToKustomize(t *testing.T, want, got rendered, source string) {
	t.Helper()
	// deploy/ makes its Namespace; the chart leaves it to helm install
	// --create-namespace, so that helm uninstall never deletes it.
	nsKey := objectKey("Namespace", "", "capscale-system")
	if _, ok := got[nsKey]; ok {
		t.Errorf("the chart renders %s: helm uninstall would delete it", nsKey)
	}
	delete(want, nsKey)
	for _, k := range commonKeys(t, want, got, source) {
		g := got[k]
		t.Run(k, func(t *testing.T) {
			gl := labelsOf(g.raw)
			if gl["app.kubernetes.io/managed-by"] != "Helm" || gl["app.kubernetes.io/instance"] != "capscale" ||
				gl["helm.sh/chart"] != "capscale-0.1.0" || gl["app.kubernetes.io/part-of"] != "capscale" {
				t.Errorf("Helm's standard labels are missing: %v", gl)
			}
			// The same JSON round trip on both sides (kustomize renders flow
			// style and comments differently from a plain file).
			var w map[string]any
			b, _ := json.Marshal(want[k].raw)
			_ = json.Unmarshal(b, &w)
			normalized := withoutHelmLabels(g.raw, labelsOf(w))
			if k == objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config") {
				gc := schedulerConfig(t, []byte(get[*corev1.ConfigMap](t, got, k).Data["config.yaml"]))
				wc := schedulerConfig(t, []byte(get[*corev1.ConfigMap](t, want, k).Data["config.yaml"]))
				if !reflect.DeepEqual(gc, wc) {
					t.Errorf("scheduler configuration differs (- %s, + chart):\n%s", source, diff.Diff(wc, gc))
				}
				delete(normalized, "data")
				delete(w, "data")
			}
			if k == objectKey("Deployment", "capscale-system", "capscale-scheduler") {
				withoutConfigChecksum(t, normalized)
			}
			if !reflect.DeepEqual(normalized, w) {
				t.Errorf("differs from %s (- kustomize, + helm):\n%s", source, diff.Diff(w, normalized))
			}
		})
	}
}

// withoutConfigChecksum drops the scheduler configuration's checksum from
// a chart render's pod template, after checking it is there: the chart's
// way to roll the pods on a change (kustomize's manifests are applied by
// hand), and the configuration itself is compared as decoded.
func withoutConfigChecksum(t *testing.T, d map[string]any) {
	t.Helper()
	meta, _ := d["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
	a, _ := meta["annotations"].(map[string]any)
	if a["capscale.io/scheduler-config-checksum"] == nil {
		t.Errorf("the chart's capscale-scheduler pods carry no configuration checksum: %v", a)
	}
	delete(a, "capscale.io/scheduler-config-checksum")
	if len(a) == 0 {
		delete(meta, "annotations")
	}
}

func labelsOf(obj map[string]any) map[string]any {
	meta, _ := obj["metadata"].(map[string]any)
	l, _ := meta["labels"].(map[string]any)
	return l
}

// withoutHelmLabels returns a deep copy of obj without the labels the chart
// adds that keep (the kustomize object's labels) does not have.
func withoutHelmLabels(obj, keep map[string]any) map[string]any {
	var c map[string]any
	b, _ := json.Marshal(obj)
	_ = json.Unmarshal(b, &c)
	meta := c["metadata"].(map[string]any)
	l, _ := meta["labels"].(map[string]any)
	for _, k := range helmAddedLabels {
		if _, ok := keep[k]; !ok {
			delete(l, k)
		}
	}
	if l != nil && len(l) == 0 {
		delete(meta, "labels")
	}
	return c
}

// customValues sets every value the chart offers away from its default;
// its renders are in the namespace infra (helm -n infra).
const customValues = `
image:
  repository: registry.example/capscale
  tag: 1.2.3
  pullPolicy: Always
tls:
  secretName: my-serving-cert
  validity: 720h
  caValidity: 8760h
extender:
  mode: extender
  defaultCapacity: 32
  replicas: 3
  resources:
    requests: {cpu: 200m, memory: 100Mi}
  kubeScheduler:
    image: {repository: registry.example/kube-scheduler, tag: v1.37.0}
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}
  tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
metricsAdapter:
  replicas: 3
  config:
    sources:
    - name: gpu-load
      url: https://backend.example/internal/subtask/load
      jsonPath: '{.data.load_balance}'
      interval: 30s
      timeout: 5s
      maxAge: 2m
    stepPolicies:
    - workload: {namespace: aicloud, kind: Deployment, name: webui}
      source: gpu-load
      scaleUpAbove: 0.8
      scaleDownBelow: 0.5
      stepUp: 3
      stepDown: 1
      minReplicas: 0
      maxReplicas: 20
      minPodAge: 10m
      interval: 5m
  resources:
    limits: {memory: 1Gi}
controller:
  replicas: 3
  resources:
    requests: {cpu: 20m}
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}
  tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
apiService:
  delegate: true
`

func writeValues(t *testing.T, values string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func container(t *testing.T, d *appsv1.Deployment, name string) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container %s", d.Name, name)
	return corev1.Container{}
}

func volume(d *appsv1.Deployment, name string) *corev1.Volume {
	for i, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &d.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

// TestHelmCustomValues: what the values say is what the objects carry.
func TestHelmCustomValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		args   []string
		check  func(t *testing.T, r rendered)
	}{{
		name:   "every value set",
		values: customValues,
		args:   []string{"--namespace", "infra"},
		check: func(t *testing.T, r rendered) {
			for _, k := range r.keys() {
				if strings.Contains(k, "capscale-system") {
					t.Errorf("%s is not in the release's namespace", k)
				}
				if strings.HasPrefix(k, "Namespace ") {
					t.Errorf("the chart renders %s: helm uninstall would delete it", k)
				}
			}

			sched := get[*appsv1.Deployment](t, r, objectKey("Deployment", "infra", "capscale-scheduler"))
			if *sched.Spec.Replicas != 3 {
				t.Errorf("scheduler replicas = %d, want 3", *sched.Spec.Replicas)
			}
			ext := container(t, sched, "extender")
			if ext.Image != "registry.example/capscale:1.2.3" || ext.ImagePullPolicy != corev1.PullAlways {
				t.Errorf("extender image %s, pull policy %q", ext.Image, ext.ImagePullPolicy)
			}
			if !slices.Contains(ext.Command, "--default-capacity=32") {
				t.Errorf("extender command %v lacks --default-capacity=32", ext.Command)
			}
			if got := ext.Resources.Requests.Cpu().String(); got != "200m" {
				t.Errorf("extender CPU request %s, want 200m", got)
			}
			if ks := container(t, sched, "kube-scheduler"); ks.Image != "registry.example/kube-scheduler:v1.37.0" {
				t.Errorf("kube-scheduler image %s", ks.Image)
			}
			if sched.Spec.Template.Spec.NodeSelector["node-role.kubernetes.io/control-plane"] != "" || len(sched.Spec.Template.Spec.Tolerations) != 1 {
				t.Errorf("scheduler placement: nodeSelector %v, tolerations %v", sched.Spec.Template.Spec.NodeSelector, sched.Spec.Template.Spec.Tolerations)
			}
			schedCM := get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "infra", "capscale-scheduler-config"))
			obj, _, err := strictDecoder(t).Decode([]byte(schedCM.Data["config.yaml"]), nil, nil)
			if err != nil {
				t.Fatalf("scheduler config: %v", err)
			}
			if le := obj.(*schedv1.KubeSchedulerConfiguration).LeaderElection; le.ResourceNamespace != "infra" {
				t.Errorf("scheduler leader election in namespace %q, want infra", le.ResourceNamespace)
			}

			adapter := get[*appsv1.Deployment](t, r, objectKey("Deployment", "infra", "capscale-metrics-adapter"))
			if *adapter.Spec.Replicas != 3 {
				t.Errorf("adapter replicas = %d, want 3", *adapter.Spec.Replicas)
			}
			wapi := get[*appsv1.Deployment](t, r, objectKey("Deployment", "infra", "capscale-workload-api"))
			for _, c := range []corev1.Container{container(t, adapter, "metrics-adapter"), container(t, wapi, "workload-api")} {
				if c.Image != "registry.example/capscale:1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
					t.Errorf("%s image %s, pull policy %q", c.Name, c.Image, c.ImagePullPolicy)
				}
			}
			if wapi.Spec.Template.Spec.ServiceAccountName != "capscale-workload-api" || volume(wapi, "token") == nil || volume(wapi, "token").Projected == nil {
				t.Errorf("workload API pods: ServiceAccount %q, token volume %+v; want their own ServiceAccount's projected token",
					wapi.Spec.Template.Spec.ServiceAccountName, volume(wapi, "token"))
			}
			if lim := container(t, adapter, "metrics-adapter").Resources.Limits; lim.Memory().String() != "1Gi" {
				got := lim.Memory().String()
				t.Errorf("adapter memory limit %s, want 1Gi", got)
			}
			// The adapter makes its own certificate in the Secret (no volume),
			// for both Services of the namespace, and keeps the APIService's
			// caBundle; delegate takes another owner's APIService over.
			if c := container(t, adapter, "metrics-adapter"); volume(adapter, "tls") != nil ||
				!slices.Contains(c.Command, "--serving-cert-secret=infra/my-serving-cert") ||
				!slices.Contains(c.Command, "--serving-cert-dns-names=capscale-metrics-adapter.infra.svc,capscale-workload-api.infra.svc") ||
				!slices.Contains(c.Command, "--serving-cert-apiservice-service=infra/capscale-metrics-adapter") ||
				!slices.Contains(c.Command, "--serving-cert-validity=720h") || !slices.Contains(c.Command, "--serving-cert-ca-validity=8760h") ||
				!slices.Contains(c.Command, "--delegate-existing-owner") {
				t.Errorf("adapter: tls volume %+v, command %v", volume(adapter, "tls"), c.Command)
			}
			if v := volume(wapi, "tls"); v == nil || v.Secret == nil || v.Secret.SecretName != "my-serving-cert" {
				t.Errorf("workload API tls volume %+v, want Secret my-serving-cert", v)
			}
			role := get[*rbacv1.Role](t, r, objectKey("Role", "infra", "capscale:metrics-adapter:serving-cert"))
			if got := role.Rules[1].ResourceNames; len(got) != 1 || got[0] != "my-serving-cert" {
				t.Errorf("the adapter may read and update Secrets %v, want only my-serving-cert", got)
			}
			// A render that cannot see the cluster has no uninstall hook
			// (applied as a plain Job it would give the APIService back at
			// install) and no APIService: the adapter registers it.
			if _, ok := r[objectKey("Job", "infra", "capscale-apiservice-restore")]; ok {
				t.Errorf("helm template renders the uninstall hook")
			}
			if c := container(t, adapter, "metrics-adapter"); !slices.Contains(c.Command, "--register-apiservice") {
				t.Errorf("the adapter is not told to register the APIService: %v", c.Command)
			}
			cm := get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "infra", "capscale-metrics-adapter-config"))
			cfg, err := config.Decode([]byte(cm.Data["config.yaml"]))
			if err != nil {
				t.Fatalf("adapter config: %v\n%s", err, cm.Data["config.yaml"])
			}
			if len(cfg.Sources) != 1 || cfg.Sources[0].Name != "gpu-load" || len(cfg.StepPolicies) != 1 ||
				cfg.StepPolicies[0].StepUp != 3 || cfg.StepPolicies[0].Workload.Name != "webui" {
				t.Errorf("adapter config %+v", cfg)
			}

			ctrl := get[*appsv1.Deployment](t, r, objectKey("Deployment", "infra", "capscale-controller"))
			if c := container(t, ctrl, "controller"); *ctrl.Spec.Replicas != 3 || c.Image != "registry.example/capscale:1.2.3" ||
				!slices.Contains(c.Command, "--leader-elect-resource-namespace=infra") || c.Resources.Requests.Cpu().String() != "20m" ||
				len(ctrl.Spec.Template.Spec.Tolerations) != 1 {
				t.Errorf("controller: replicas %d, container %+v, tolerations %v", *ctrl.Spec.Replicas, c, ctrl.Spec.Template.Spec.Tolerations)
			}
			get[*rbacv1.Role](t, r, objectKey("Role", "infra", "capscale:controller-leader-election"))

			if _, ok := r[objectKey("APIService", "", "v1beta1.external.metrics.k8s.io")]; ok {
				t.Errorf("helm template renders the APIService")
			}
			for _, k := range r.keys() {
				crb, ok := r[k].typed.(*rbacv1.ClusterRoleBinding)
				if !ok {
					continue
				}
				for _, s := range crb.Subjects {
					if s.Name != "horizontal-pod-autoscaler" && s.Namespace != "infra" {
						t.Errorf("%s binds %s/%s, want namespace infra", k, s.Namespace, s.Name)
					}
				}
			}
		},
	}, {
		name: "only the adapter",
		values: `
scheduler: {enabled: false}
workloadAPI: {enabled: false}
controller: {enabled: false}
metricsAdapter: {replicas: 1}
apiService: {create: false}
`,
		check: func(t *testing.T, r rendered) {
			for _, k := range []string{
				objectKey("Namespace", "", "capscale-system"),
				objectKey("Deployment", "capscale-system", "capscale-scheduler"),
				objectKey("ServiceAccount", "capscale-system", "capscale-extender"),
				objectKey("ClusterRole", "", "capscale:extender"),
				objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config"),
				objectKey("ServiceAccount", "capscale-system", "capscale-workload-api"),
				objectKey("ClusterRole", "", "capscale:workload-api"),
				objectKey("Deployment", "capscale-system", "capscale-workload-api"),
				objectKey("Service", "capscale-system", "capscale-workload-api"),
				objectKey("ClusterRole", "", "capscale-workload:scale"),
				objectKey("PodDisruptionBudget", "capscale-system", "capscale-metrics-adapter"),
				objectKey("APIService", "", "v1beta1.external.metrics.k8s.io"),
				objectKey("Deployment", "capscale-system", "capscale-controller"),
				objectKey("ClusterRole", "", "capscale:controller"),
			} {
				if _, ok := r[k]; ok {
					t.Errorf("%s is rendered", k)
				}
			}
			adapter := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-metrics-adapter"))
			if n := len(adapter.Spec.Template.Spec.Containers); n != 1 || volume(adapter, "workload-api-token") != nil {
				t.Errorf("adapter has %d containers and workload-api-token volume %v, want only the adapter", n, volume(adapter, "workload-api-token"))
			}
			if c := container(t, adapter, "metrics-adapter"); slices.Contains(c.Command, "--register-apiservice") {
				t.Errorf("apiService.create=false, yet the adapter registers the APIService: %v", c.Command)
			}
			get[*corev1.Service](t, r, objectKey("Service", "capscale-system", "capscale-metrics-adapter"))
			get[*rbacv1.ClusterRole](t, r, objectKey("ClusterRole", "", "capscale:metrics-adapter"))
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplate(t, append(tc.args, "-f", writeValues(t, tc.values))...)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

// TestHelmRemovedNamespaceValues (issue 57 §4): the values that chose and
// created capscale's namespace before it came from helm -n are refused
// with a message that says what to do instead, never silently ignored (an
// install would land in another namespace than the operator meant).
func TestHelmRemovedNamespaceValues(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"namespace", "namespace: infra\n", "the value namespace is gone: capscale installs in the release's namespace; use helm install -n infra --create-namespace"},
		{"createNamespace", "createNamespace: false\n", "the value createNamespace is gone: the chart creates no Namespace; use helm install -n NAMESPACE --create-namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplate(t, "-f", writeValues(t, tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want the refusal %q", tc.values, err, tc.want)
			}
		})
	}
}

// TestHelmValuesSchema: values.schema.json refuses unknown keys and wrong
// types, including in the adapter configuration, and never offers
// insecureSkipTLSVerify.
func TestHelmValuesSchema(t *testing.T) {
	source := func(extra string) string {
		return `
metricsAdapter:
  config:
    sources:
    - {name: a, url: "https://a.example/", jsonPath: "{.v}", interval: 30s, timeout: 5s, maxAge: 2m` + extra + `}
`
	}
	for _, tc := range []struct {
		name, values, want string
	}{
		{"unknown top-level key", "replicas: 3\n", "'replicas' not allowed"},
		{"insecure APIService", "apiService: {insecureSkipTLSVerify: true}\n", "'insecureSkipTLSVerify' not allowed"},
		{"misspelt nested key", "extender: {defaultCapacty: 5}\n", "'defaultCapacty' not allowed"},
		{"capacity as a string", "extender: {defaultCapacity: ten}\n", "/extender/defaultCapacity"},
		{"replicas as a string", "metricsAdapter: {replicas: \"2\"}\n", "/metricsAdapter/replicas"},
		{"no replicas", "metricsAdapter: {replicas: 0}\n", "/metricsAdapter/replicas"},
		{"negative capacity", "extender: {defaultCapacity: -1}\n", "/extender/defaultCapacity"},
		{"unknown pull policy", "image: {pullPolicy: Sometimes}\n", "/image/pullPolicy"},
		{"enabled as a string", "workloadAPI: {enabled: \"yes\"}\n", "/workloadAPI/enabled"},
		{"unknown source field", source(", jsonpath: x"), "'jsonpath' not allowed"},
		{"bad duration", strings.Replace(source(""), "30s", "30 seconds", 1), "/metricsAdapter/config/sources/0/interval"},
		{"unknown config key", "metricsAdapter: {config: {source: []}}\n", "'source' not allowed"},
		{"pull secret as a string", "imagePullSecrets: [regcred]\n", "/imagePullSecrets/0"},
		{"priority class as a number", "priorityClassName: 1000\n", "/priorityClassName"},
		{"negative verbosity", "logVerbosity: -1\n", "/logVerbosity"},
		{"annotation as a number", "podAnnotations: {a: 1}\n", "/podAnnotations/a"},
		{"unknown seccomp type", "podSecurityContext: {seccompProfile: {type: Default}}\n", "/podSecurityContext/seccompProfile/type"},
		{"capability as a string", "securityContext: {capabilities: {drop: ALL}}\n", "/securityContext/capabilities/drop"},
		{"affinity misspelt", "controller: {affinity: {podAntiAfinity: {}}}\n", "'podAntiAfinity' not allowed"},
		{"spread without topologyKey", "workloadAPI: {topologySpreadConstraints: [{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}]}\n", "topologyKey"},
		{"workload API nodeSelector as a list", "workloadAPI: {nodeSelector: [a]}\n", "/workloadAPI/nodeSelector"},
		{"extra argument not a flag", "metricsAdapter: {extraArgs: [v=4]}\n", "/metricsAdapter/extraArgs/0"},
		{"env without name", "controller: {extraEnv: [{value: x}]}\n", "name"},
		{"volume without source", "extender: {extraVolumes: [{name: ca}]}\n", "/extender/extraVolumes/0"},
		{"relative mount path", "metricsAdapter: {extraVolumeMounts: [{name: ca, mountPath: etc/ca}]}\n", "/metricsAdapter/extraVolumeMounts/0/mountPath"},
		{"plugin resources misplaced", "extender: {pluginScheduler: {requests: {cpu: 1}}}\n", "'requests' not allowed"},
		{"PDB minAvailable as a word", "controller: {podDisruptionBudget: {minAvailable: one}}\n", "/controller/podDisruptionBudget/minAvailable"},
		{"PDB unknown eviction policy", "extender: {podDisruptionBudget: {unhealthyPodEvictionPolicy: Never}}\n", "/extender/podDisruptionBudget/unhealthyPodEvictionPolicy"},
		{"PDB misspelt", "workloadAPI: {podDisruptionBudget: {minAvaliable: 1}}\n", "'minAvaliable' not allowed"},
		{"component priority class as a number", "metricsAdapter: {priorityClassName: 1}\n", "/metricsAdapter/priorityClassName"},
		{"negative revisionHistoryLimit", "controller: {revisionHistoryLimit: -1}\n", "/controller/revisionHistoryLimit"},
		{"unknown update strategy", "metricsAdapter: {updateStrategy: {type: BlueGreen}}\n", "/metricsAdapter/updateStrategy/type"},
		{"digest without algorithm", "image: {digest: abc}\n", "/image/digest"},
		{"scheduler replicas as a string", "extender: {replicas: \"2\"}\n", "/extender/replicas"},
		{"deprecated schedulerReplicas zero", "extender: {schedulerReplicas: 0}\n", "/extender/schedulerReplicas"},
		{"scheduler.enabled as a string", "scheduler: {enabled: \"no\"}\n", "/scheduler/enabled"},
		{"additionalLabels as a list", "monitoring: {serviceMonitor: {additionalLabels: [a]}}\n", "/monitoring/serviceMonitor/additionalLabels"},
		{"scrapeTimeout not a duration", "monitoring: {serviceMonitor: {scrapeTimeout: 10}}\n", "/monitoring/serviceMonitor/scrapeTimeout"},
		{"relabeling misspelt", "monitoring: {serviceMonitor: {relabelings: [{sourceLabel: [a]}]}}\n", "sourceLabel"},
		{"metricRelabeling unknown action", "monitoring: {serviceMonitor: {metricRelabelings: [{action: delete}]}}\n", "/monitoring/serviceMonitor/metricRelabelings/0/action"},
		{"prometheusRule enabled as a string", "monitoring: {prometheusRule: {enabled: \"yes\"}}\n", "/monitoring/prometheusRule/enabled"},
		{"prometheusRule pendingFor not a duration", "monitoring: {prometheusRule: {pendingFor: ten}}\n", "/monitoring/prometheusRule/pendingFor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplate(t, "-f", writeValues(t, tc.values))
			if err == nil {
				t.Fatalf("values accepted:\n%s", tc.values)
			}
			if msg := err.Error(); !strings.Contains(msg, "schema") || !strings.Contains(msg, tc.want) {
				t.Errorf("error does not come from the schema or does not name %q:\n%s", tc.want, msg)
			}
		})
	}
	// A valid source passes the same schema.
	if _, err := helmTemplate(t, "-f", writeValues(t, source(", fallback: 0.5"))); err != nil {
		t.Errorf("a valid source is refused: %v", err)
	}
}
