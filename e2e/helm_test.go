//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/diff"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/metricsadapter/config"
)

// The tests in this file need no control plane: they run helm and kubectl
// (from `make control-plane`) on the chart in deploy/helm/capscale and the
// manifests in deploy/, deploy/monitoring/.

// renderedObject is one object of a render: its generic form, compared
// field by field, and its typed form, decoded strictly.
type renderedObject struct {
	raw   map[string]any
	typed runtime.Object // nil for kinds outside the scheme (ServiceMonitor)
}

// rendered maps "Kind namespace/name" to the object.
type rendered map[string]renderedObject

func objectKey(kind, namespace, name string) string { return kind + " " + namespace + "/" + name }

func chartDir() string { return filepath.Join(plane.RepoRoot(), "deploy", "helm", "capscale") }

// deployTool returns the path of helm or kubectl as `make control-plane`
// built them; nothing is downloaded at test time.
func deployTool(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("CAPSCALE_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(plane.RepoRoot(), "_output", "bin")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is not in %s: run `make control-plane` or set CAPSCALE_BIN_DIR: %v", name, dir, err)
	}
	return p
}

// runDeployTool runs helm or kubectl in the repository root and returns its
// standard output; the error carries standard error.
func runDeployTool(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(deployTool(t, name), args...)
	cmd.Dir = plane.RepoRoot()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// helmStrictDecoder rejects unknown and duplicate fields, like deploy/'s
// unit test does for the plain manifests.
func helmStrictDecoder(t *testing.T) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{scheme.AddToScheme, apiregv1.AddToScheme, schedv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, s, s,
		jsonserializer.SerializerOptions{Yaml: true, Strict: true})
}

// decodeRender splits a multi-document render into objects, each decoded
// generically and, when its kind is in the scheme, strictly.
func decodeRender(t *testing.T, text string) rendered {
	t.Helper()
	dec := helmStrictDecoder(t)
	objs := rendered{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		var raw map[string]any
		if err := yaml.Unmarshal(doc, &raw); err != nil {
			t.Fatalf("decoding a rendered document: %v\n%s", err, doc)
		}
		if len(raw) == 0 {
			continue
		}
		kind, _ := raw["kind"].(string)
		meta, _ := raw["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		name, _ := meta["name"].(string)
		key := objectKey(kind, ns, name)
		if _, dup := objs[key]; dup {
			t.Errorf("%s is rendered twice", key)
		}
		o := renderedObject{raw: raw}
		typed, _, err := dec.Decode(doc, nil, nil)
		switch {
		case err == nil:
			o.typed = typed
		case runtime.IsNotRegisteredError(err):
		default:
			t.Errorf("%s does not decode strictly: %v", key, err)
		}
		objs[key] = o
	}
	return objs
}

func (r rendered) keys() []string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// get returns the typed object of key, failing the test when it is absent.
func get[T runtime.Object](t *testing.T, r rendered, key string) T {
	t.Helper()
	o, ok := r[key]
	if !ok {
		t.Fatalf("%s is not rendered; rendered: %v", key, r.keys())
	}
	typed, ok := o.typed.(T)
	if !ok {
		t.Fatalf("%s is a %T", key, o.typed)
	}
	return typed
}

func helmTemplate(t *testing.T, args ...string) (rendered, error) {
	t.Helper()
	out, err := runDeployTool(t, "helm", append([]string{"template", "capscale", chartDir()}, args...)...)
	if err != nil {
		return nil, err
	}
	return decodeRender(t, out), nil
}

func kustomize(t *testing.T, dir string) rendered {
	t.Helper()
	out, err := runDeployTool(t, "kubectl", "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return decodeRender(t, out)
}

func TestHelmLint(t *testing.T) {
	if out, err := runDeployTool(t, "helm", "lint", "--strict", chartDir()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := runDeployTool(t, "helm", "lint", "--strict", chartDir(), "-f", writeValues(t, customValues)); err != nil {
		t.Fatalf("with custom values: %v\n%s", err, out)
	}
}

// helmAddedLabels are the labels the chart puts on every object on top of
// those of deploy/.
var helmAddedLabels = []string{
	"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
	"app.kubernetes.io/version", "app.kubernetes.io/part-of",
}

// TestHelmRendersKustomize: with default values the chart renders exactly
// the objects of `kubectl kustomize deploy/`, and each object is equal field
// by field, except for the labels Helm adds.
func TestHelmRendersKustomize(t *testing.T) {
	want := kustomize(t, "deploy")
	// CRDs ship in the chart's crds/ directory, which helm template leaves
	// out; apis/capscale/v1alpha1's unit test keeps it equal to deploy/crd.
	for k, o := range want {
		if o.raw["kind"] == "CustomResourceDefinition" {
			delete(want, k)
		}
	}
	got, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range want.keys() {
		if _, ok := got[k]; !ok {
			t.Errorf("the chart does not render %s", k)
		}
	}
	for _, k := range got.keys() {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart renders %s, which deploy/ does not have", k)
		}
	}
	for _, k := range want.keys() {
		g, ok := got[k]
		if !ok {
			continue
		}
		t.Run(k, func(t *testing.T) {
			w := want[k].raw
			gl := labelsOf(g.raw)
			if gl["app.kubernetes.io/managed-by"] != "Helm" || gl["app.kubernetes.io/instance"] != "capscale" ||
				gl["helm.sh/chart"] != "capscale-0.1.0" || gl["app.kubernetes.io/part-of"] != "capscale" {
				t.Errorf("Helm's standard labels are missing: %v", gl)
			}
			normalized := withoutHelmLabels(g.raw, labelsOf(w))
			if !reflect.DeepEqual(normalized, w) {
				t.Errorf("differs from deploy/ (- kustomize, + helm):\n%s", diff.Diff(w, normalized))
			}
		})
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

// customValues sets every value the chart offers away from its default.
const customValues = `
namespace: infra
image:
  repository: registry.example/capscale
  tag: 1.2.3
  pullPolicy: Always
tls:
  secretName: my-serving-cert
extender:
  defaultCapacity: 32
  schedulerReplicas: 3
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
  caBundle: Q0EK
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
		check  func(t *testing.T, r rendered)
	}{{
		name:   "every value set",
		values: customValues,
		check: func(t *testing.T, r rendered) {
			for _, k := range r.keys() {
				if strings.Contains(k, "capscale-system") {
					t.Errorf("%s is not in the configured namespace", k)
				}
			}
			get[*corev1.Namespace](t, r, objectKey("Namespace", "", "infra"))

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
			obj, _, err := helmStrictDecoder(t).Decode([]byte(schedCM.Data["config.yaml"]), nil, nil)
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
			if v := volume(adapter, "tls"); v == nil || v.Secret == nil || v.Secret.SecretName != "my-serving-cert" {
				t.Errorf("adapter tls volume %+v, want Secret my-serving-cert", v)
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

			as := get[*apiregv1.APIService](t, r, objectKey("APIService", "", "v1beta1.external.metrics.k8s.io"))
			if as.Spec.Service.Namespace != "infra" || string(as.Spec.CABundle) != "CA\n" || as.Spec.InsecureSkipTLSVerify {
				t.Errorf("APIService service %+v, caBundle %q, insecure %v", as.Spec.Service, as.Spec.CABundle, as.Spec.InsecureSkipTLSVerify)
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
createNamespace: false
extender: {enabled: false}
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
			get[*corev1.Service](t, r, objectKey("Service", "capscale-system", "capscale-metrics-adapter"))
			get[*rbacv1.ClusterRole](t, r, objectKey("ClusterRole", "", "capscale:metrics-adapter"))
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplate(t, "-f", writeValues(t, tc.values))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
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
		{"invalid namespace", "namespace: Capscale_System\n", "/namespace"},
		{"enabled as a string", "workloadAPI: {enabled: \"yes\"}\n", "/workloadAPI/enabled"},
		{"unknown source field", source(", jsonpath: x"), "'jsonpath' not allowed"},
		{"bad duration", strings.Replace(source(""), "30s", "30 seconds", 1), "/metricsAdapter/config/sources/0/interval"},
		{"unknown config key", "metricsAdapter: {config: {source: []}}\n", "'source' not allowed"},
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

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var promMetricName = regexp.MustCompile(`\bcapscale_[a-zA-Z0-9_]+`)

// TestGrafanaDashboard: the dashboard is valid JSON, and its queries use
// only metrics that capscale's Go code defines, and every one of them.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(plane.RepoRoot(), "deploy", "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if d.UID != "capscale" || d.SchemaVersion != 39 || d.Title == "" {
		t.Errorf("uid %q, schemaVersion %d, title %q; want uid capscale, schemaVersion 39", d.UID, d.SchemaVersion, d.Title)
	}

	defined, histograms := goMetricNames(t)
	if len(defined) < 20 {
		t.Fatalf("found only %d capscale metrics in the Go sources: %v", len(defined), defined)
	}
	t.Logf("%d capscale metrics in the Go sources (histograms: %d)", len(defined), len(histograms))
	used := map[string]bool{}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				names := promMetricName.FindAllString(tg.Expr, -1)
				if len(names) == 0 {
					t.Errorf("panel %q: query %q uses no capscale metric", p.Title, tg.Expr)
				}
				for _, n := range names {
					base := n
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						if b, ok := strings.CutSuffix(n, suffix); ok && histograms[b] {
							base = b
						}
					}
					if !defined[base] {
						t.Errorf("panel %q: %s is not a metric the Go sources define", p.Title, n)
					}
					used[base] = true
				}
			}
		}
	}
	walk(d.Panels)
	for n := range defined {
		if !used[n] {
			t.Errorf("%s is not on the dashboard", n)
		}
	}
}

// goMetricNames parses capscale's non-test Go sources and returns the full
// name of every Prometheus metric they define with a capscale_ prefix: the
// Namespace/Subsystem/Name of prometheus.*Opts literals (constants and
// function parameters resolved to the string literals given to them) and
// the first argument of prometheus.NewDesc. histograms holds those defined
// with HistogramOpts.
func goMetricNames(t *testing.T) (names, histograms map[string]bool) {
	t.Helper()
	root := plane.RepoRoot()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "e2e", "_output", "vendor", "testdata", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Calls by function name, to resolve a parameter to its arguments.
	calls := map[string][]*ast.CallExpr{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				switch fn := c.Fun.(type) {
				case *ast.Ident:
					calls[fn.Name] = append(calls[fn.Name], c)
				case *ast.SelectorExpr:
					calls[fn.Sel.Name] = append(calls[fn.Sel.Name], c)
				}
			}
			return true
		})
	}
	literal := func(e ast.Expr) (string, bool) {
		if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.STRING {
			s, err := strconv.Unquote(l.Value)
			return s, err == nil
		}
		return "", false
	}

	names, histograms = map[string]bool{}, map[string]bool{}
	for _, f := range files {
		consts := map[string]string{}
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == len(vs.Values) {
				for i, id := range vs.Names {
					if s, ok := literal(vs.Values[i]); ok {
						consts[id.Name] = s
					}
				}
			}
			return true
		})
		// resolve gives the values an Opts field can have inside fn.
		resolve := func(e ast.Expr, fn *ast.FuncDecl) []string {
			if s, ok := literal(e); ok {
				return []string{s}
			}
			id, ok := e.(*ast.Ident)
			if !ok {
				return nil
			}
			if s, ok := consts[id.Name]; ok {
				return []string{s}
			}
			if fn == nil {
				return nil
			}
			i := 0
			for _, field := range fn.Type.Params.List {
				for _, pn := range field.Names {
					if pn.Name == id.Name {
						var vals []string
						for _, c := range calls[fn.Name.Name] {
							if i < len(c.Args) {
								if s, ok := literal(c.Args[i]); ok {
									vals = append(vals, s)
								}
							}
						}
						return vals
					}
					i++
				}
			}
			return nil
		}
		visit := func(n ast.Node, fn *ast.FuncDecl) {
			switch x := n.(type) {
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewDesc" && len(x.Args) > 0 {
					if s, ok := literal(x.Args[0]); ok && strings.HasPrefix(s, "capscale_") {
						names[s] = true
					}
				}
			case *ast.CompositeLit:
				sel, ok := x.Type.(*ast.SelectorExpr)
				if !ok {
					return
				}
				switch sel.Sel.Name {
				case "CounterOpts", "GaugeOpts", "HistogramOpts", "SummaryOpts":
				default:
					return
				}
				parts := map[string][]string{"Namespace": {""}, "Subsystem": {""}, "Name": nil}
				for _, el := range x.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					k, ok := kv.Key.(*ast.Ident)
					if !ok {
						continue
					}
					if _, want := parts[k.Name]; !want {
						continue
					}
					vals := resolve(kv.Value, fn)
					if len(vals) == 0 {
						t.Errorf("%s: cannot resolve %s of a metric to a string", fset.Position(kv.Pos()), k.Name)
					}
					parts[k.Name] = vals
				}
				for _, ns := range parts["Namespace"] {
					for _, sub := range parts["Subsystem"] {
						for _, name := range parts["Name"] {
							fq := prometheus.BuildFQName(ns, sub, name)
							if strings.HasPrefix(fq, "capscale_") {
								names[fq] = true
								if sel.Sel.Name == "HistogramOpts" {
									histograms[fq] = true
								}
							}
						}
					}
				}
			}
		}
		for _, decl := range f.Decls {
			fn, _ := decl.(*ast.FuncDecl)
			ast.Inspect(decl, func(n ast.Node) bool {
				visit(n, fn)
				return true
			})
		}
	}
	return names, histograms
}

// TestGrafanaServiceMonitors: each ServiceMonitor of deploy/monitoring/
// selects exactly one Service of deploy/ or deploy/monitoring/ that has its
// port and reaches a named container port of a capscale pod; TLS is verified
// with the serving CA for the Service's name; the adapter's scrape token
// may get /metrics; the dashboard ConfigMap carries grafana-dashboard.json.
func TestGrafanaServiceMonitors(t *testing.T) {
	install := kustomize(t, "deploy")
	mon := kustomize(t, filepath.Join("deploy", "monitoring"))
	all := rendered{}
	for _, r := range []rendered{install, mon} {
		for k, o := range r {
			all[k] = o
		}
	}
	const servingSecret = "capscale-serving-cert"

	type endpoint struct {
		Port, Scheme, Path string
		Authorization      *struct {
			Type        string
			Credentials struct{ Name, Key string }
		}
		TLSConfig *struct {
			ServerName string
			CA         struct{ Secret *struct{ Name, Key string } }
		} `json:"tlsConfig"`
	}
	type serviceMonitor struct {
		Metadata struct{ Name, Namespace string }
		Spec     struct {
			Selector  struct{ MatchLabels map[string]string }
			Endpoints []endpoint
		}
	}
	var monitors []serviceMonitor
	for _, k := range mon.keys() {
		if !strings.HasPrefix(k, "ServiceMonitor ") {
			continue
		}
		b, _ := json.Marshal(mon[k].raw)
		var sm serviceMonitor
		if err := json.Unmarshal(b, &sm); err != nil {
			t.Fatal(err)
		}
		monitors = append(monitors, sm)
	}
	if len(monitors) != 3 {
		t.Fatalf("want ServiceMonitors for the adapter, the extender and the workload API, got %d", len(monitors))
	}
	matches := func(sel, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	for _, sm := range monitors {
		t.Run(sm.Metadata.Name, func(t *testing.T) {
			var svcs []*corev1.Service
			for _, k := range all.keys() {
				if s, ok := all[k].typed.(*corev1.Service); ok && s.Namespace == sm.Metadata.Namespace && matches(sm.Spec.Selector.MatchLabels, s.Labels) {
					svcs = append(svcs, s)
				}
			}
			if len(svcs) != 1 {
				t.Fatalf("selects %d Services, want 1", len(svcs))
			}
			svc := svcs[0]
			if len(sm.Spec.Endpoints) != 1 {
				t.Fatalf("%d endpoints, want 1", len(sm.Spec.Endpoints))
			}
			ep := sm.Spec.Endpoints[0]
			var port *corev1.ServicePort
			for i := range svc.Spec.Ports {
				if svc.Spec.Ports[i].Name == ep.Port {
					port = &svc.Spec.Ports[i]
				}
			}
			if port == nil {
				t.Fatalf("Service %s has no port %q", svc.Name, ep.Port)
			}
			// The Service's target port is a named port of a capscale pod.
			found := false
			for _, k := range all.keys() {
				d, ok := all[k].typed.(*appsv1.Deployment)
				if !ok || !matches(svc.Spec.Selector, d.Spec.Template.Labels) {
					continue
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					for _, p := range c.Ports {
						if p.Name == port.TargetPort.String() {
							found = true
						}
					}
				}
			}
			if !found {
				t.Errorf("no pod selected by Service %s has a port named %s", svc.Name, port.TargetPort.String())
			}
			if ep.Path != "/metrics" {
				t.Errorf("path %q", ep.Path)
			}
			if ep.Scheme == "https" {
				wantName := svc.Name + "." + svc.Namespace + ".svc"
				if ep.TLSConfig == nil || ep.TLSConfig.ServerName != wantName || ep.TLSConfig.CA.Secret == nil ||
					ep.TLSConfig.CA.Secret.Name != servingSecret || ep.TLSConfig.CA.Secret.Key != "ca.crt" {
					t.Errorf("https without verification against %s/ca.crt for %s: %+v", servingSecret, wantName, ep.TLSConfig)
				}
			}
			if a := ep.Authorization; a != nil {
				secret := get[*corev1.Secret](t, all, objectKey("Secret", sm.Metadata.Namespace, a.Credentials.Name))
				sa := secret.Annotations[corev1.ServiceAccountNameKey]
				if secret.Type != corev1.SecretTypeServiceAccountToken || a.Credentials.Key != corev1.ServiceAccountTokenKey || a.Type != "Bearer" {
					t.Errorf("authorization %+v with Secret of type %s", a, secret.Type)
				}
				if !serviceAccountMayGetMetrics(all, sm.Metadata.Namespace, sa) {
					t.Errorf("ServiceAccount %s may not get /metrics", sa)
				}
			}
		})
	}
	if sm := monitors[slices.IndexFunc(monitors, func(sm serviceMonitor) bool { return sm.Metadata.Name == "capscale-metrics-adapter" })]; sm.Spec.Endpoints[0].Authorization == nil {
		t.Errorf("the adapter authorizes /metrics: its ServiceMonitor must send a token")
	}

	cm := get[*corev1.ConfigMap](t, mon, objectKey("ConfigMap", "capscale-system", "capscale-grafana-dashboard"))
	b, err := os.ReadFile(filepath.Join(plane.RepoRoot(), "deploy", "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["grafana-dashboard.json"] != string(b) || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap does not carry grafana-dashboard.json with label grafana_dashboard=1")
	}
}

// serviceAccountMayGetMetrics reports whether a ClusterRoleBinding grants
// namespace/name `get` on the non-resource URL /metrics.
func serviceAccountMayGetMetrics(r rendered, namespace, name string) bool {
	for _, k := range r.keys() {
		crb, ok := r[k].typed.(*rbacv1.ClusterRoleBinding)
		if !ok || !slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == namespace && s.Name == name
		}) {
			continue
		}
		role, ok := r[objectKey("ClusterRole", "", crb.RoleRef.Name)].typed.(*rbacv1.ClusterRole)
		if !ok {
			continue
		}
		for _, rule := range role.Rules {
			if slices.Contains(rule.NonResourceURLs, "/metrics") && slices.Contains(rule.Verbs, "get") {
				return true
			}
		}
	}
	return false
}
