// Package deploy holds capscale's manifests; this test keeps them valid.
package deploy

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/metricsadapter/config"
)

// strictDecoder rejects unknown and duplicate fields, so a typo in a
// manifest fails here rather than being dropped by the apiserver.
func strictDecoder(t *testing.T) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{scheme.AddToScheme, apiregv1.AddToScheme, schedv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Yaml: true, Strict: true})
}

// documents returns every YAML document of every manifest under deploy/.
func documents(t *testing.T) map[string][]byte {
	t.Helper()
	docs := map[string][]byte{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// Helm templates are not plain YAML, and the monitoring manifests
		// need the prometheus-operator CRDs: helm_test.go and
		// servicemonitor_test.go check those. Karpenter's examples need
		// its CRDs: the e2e suite's TestKarpenterNative applies them to an
		// apiserver that has them (from Karpenter's module).
		if d.IsDir() && (path == "helm" || path == "monitoring" || path == filepath.Join("examples", "karpenter")) {
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Ext(path) != ".yaml" || filepath.Base(path) == "kustomization.yaml" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		r := utilyaml.NewYAMLReader(bufioReader(b))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if err != nil {
				break
			}
			if len(bytes.TrimSpace(doc)) > 0 && !isComment(doc) {
				docs[path+"#"+string(rune('0'+i))] = doc
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

func TestManifestsDecodeStrictly(t *testing.T) {
	dec := strictDecoder(t)
	docs := documents(t)
	if len(docs) < 20 {
		t.Fatalf("found only %d manifests under deploy/", len(docs))
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			obj, gvk, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("decoding: %v", err)
			}
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				checkConfigMap(t, dec, cm)
			}
			if hpa, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler); ok {
				checkHPA(t, hpa)
			}
			t.Logf("%s", gvk)
		})
	}
}

// checkConfigMap decodes the configurations that ConfigMaps carry.
func checkConfigMap(t *testing.T, dec runtime.Decoder, cm *corev1.ConfigMap) {
	switch cm.Name {
	case "capscale-scheduler-config":
		if _, _, err := dec.Decode([]byte(cm.Data["config.yaml"]), nil, nil); err != nil {
			t.Errorf("scheduler config: %v", err)
		}
	case "capscale-metrics-adapter-config":
		if _, err := config.Decode([]byte(cm.Data["config.yaml"])); err != nil {
			t.Errorf("adapter config: %v", err)
		}
	case "capscale-capacity-sources":
		f, err := capacitysource.Decode([]byte(cm.Data["sources.yaml"]))
		if err == nil {
			_, err = f.Compile()
		}
		if err != nil {
			t.Errorf("capacity sources: %v", err)
		}
	default:
		t.Errorf("unexpected ConfigMap %s: add a check for its content", cm.Name)
	}
}

func checkHPA(t *testing.T, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	for _, m := range hpa.Spec.Metrics {
		if m.External == nil {
			continue
		}
		switch n := m.External.Metric.Name; n {
		case names.DesiredReplicasMetric, names.TotalQPSMetric, names.LoadIndexMetric:
		default:
			t.Errorf("HPA %s uses metric %q that capscale does not serve", hpa.Name, n)
		}
	}
	b := hpa.Spec.Behavior
	if b == nil || b.ScaleUp == nil || b.ScaleUp.Tolerance == nil || b.ScaleDown == nil || b.ScaleDown.Tolerance == nil {
		t.Errorf("HPA %s does not set behavior tolerances: the default ±10%% would swallow small steps", hpa.Name)
	}
}

// TestSecondSchedulerMatchesE2EConfig: the in-cluster second scheduler must
// call the extender exactly as the configuration the e2e suite verifies.
func TestSecondSchedulerMatchesE2EConfig(t *testing.T) {
	tested := schedulerConfig(t, mustRead(t, "scheduler/kube-scheduler-config.yaml"))
	var cm corev1.ConfigMap
	for path, doc := range documents(t) {
		if strings.HasPrefix(path, "scheduler/") && bytes.Contains(doc, []byte("name: capscale-scheduler-config")) {
			if err := yaml.Unmarshal(doc, &cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	deployed := schedulerConfig(t, []byte(cm.Data["config.yaml"]))
	if !reflect.DeepEqual(tested.Extenders, deployed.Extenders) {
		t.Errorf("extenders differ:\n e2e:      %+v\n deployed: %+v", tested.Extenders, deployed.Extenders)
	}
	// Exact most-free-first costs every node per pod: only the profile
	// underlay pods name may pay for it, never the whole scheduler.
	if tested.PercentageOfNodesToScore != nil || deployed.PercentageOfNodesToScore != nil {
		t.Errorf("a global percentageOfNodesToScore taxes every pod; set it on the capscale-scheduler profile")
	}
	for name, cfg := range map[string]*schedv1.KubeSchedulerConfiguration{"e2e": tested, "deployed": deployed} {
		found := false
		for _, p := range cfg.Profiles {
			if p.SchedulerName != nil && *p.SchedulerName == "capscale-scheduler" {
				found = true
				if p.PercentageOfNodesToScore == nil || *p.PercentageOfNodesToScore != 100 {
					t.Errorf("%s: profile capscale-scheduler must set percentageOfNodesToScore: 100", name)
				}
			} else if p.PercentageOfNodesToScore != nil {
				t.Errorf("%s: profile %v must keep kube-scheduler's node sampling", name, p.SchedulerName)
			}
		}
		if !found {
			t.Errorf("%s: no capscale-scheduler profile", name)
		}
	}
	ext := tested.Extenders
	if len(ext) != 1 || len(ext[0].ManagedResources) != 1 || ext[0].ManagedResources[0].Name != names.UnderlayIPResource || !ext[0].ManagedResources[0].IgnoredByScheduler {
		t.Errorf("the extender must manage %s with ignoredByScheduler: %+v", names.UnderlayIPResource, ext)
	}
}

func schedulerConfig(t *testing.T, b []byte) *schedv1.KubeSchedulerConfiguration {
	t.Helper()
	obj, _, err := strictDecoder(t).Decode(b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := obj.(*schedv1.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("got %T, want a KubeSchedulerConfiguration", obj)
	}
	return c
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func isComment(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return false
		}
	}
	return true
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// TestImageRecipe pins what make image builds (issue 44; no Dockerfile: the
// image is made from the Go binaries by hack/oci, whose own tests check the
// image itself): every binary under cmd/, static and reproducible, and the
// user 65532:65532 the chart runs as.
func TestImageRecipe(t *testing.T) {
	mk := string(mustRead(t, "../Makefile"))
	for _, want := range []string{
		"CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$dir/ ./cmd/...",
		"-o $$dir/capscale-scheduler .",
		"$(OCI) image --bin-dir",
	} {
		if !strings.Contains(mk, want) {
			t.Errorf("make image lacks %q", want)
		}
	}
	if !strings.Contains(mk, "-trimpath") || !strings.Contains(mk, "internal/version.Version=") {
		t.Errorf("make build must use -trimpath and stamp internal/version.Version")
	}
	if _, err := os.Stat("../Dockerfile"); err == nil {
		t.Errorf("a Dockerfile is back: make image builds the image; keep one recipe")
	}
	oci := string(mustRead(t, "../hack/oci/image.go"))
	if !strings.Contains(oci, `const User = "65532:65532"`) {
		t.Errorf("hack/oci no longer runs the image as 65532:65532, the chart's runAsUser")
	}
	// TestHelmSecureByDefault renders the chart's pods with this user.
	if v := string(mustRead(t, "helm/capscale/values.yaml")); !strings.Contains(v, "  runAsUser: 65532\n  runAsGroup: 65532\n") {
		t.Errorf("helm/capscale/values.yaml: pods no longer run as 65532:65532")
	}
}
