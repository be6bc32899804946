package deploy

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capscale/capscale/kubectl"
	"github.com/capscale/capscale/metricsadapter/config"
	"github.com/capscale/capscale/metricsadapter/source"
)

// exampleKinds: a word of an example's file name and the kind the file must
// then hold, so that each file does what its name says.
var exampleKinds = []struct{ word, kind string }{
	{"hpa", "HorizontalPodAutoscaler"},
	{"config", "ConfigMap"},
	{"nodeoverlay", "NodeOverlay"},
	{"nodepool", "NodePool"},
	{"nodeclass", "KWOKNodeClass"},
}

// commandRE is a kubectl capscale command quoted in a comment.
var commandRE = regexp.MustCompile("`kubectl capscale ([^`]+)`")

// TestExamples: every file under deploy/examples/ parses (strictly for the
// kinds client-go knows) and holds the kinds its name says; an adapter
// config it carries is one the adapter takes, with the files it names; an
// HPA on capscale-desired-replicas with policy load-step has its step policy
// in the file's config; and a `kubectl capscale` command its comments show
// runs and prints the file's objects.
func TestExamples(t *testing.T) {
	var files []string
	err := filepath.WalkDir("examples", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			if filepath.Ext(f) != ".yaml" {
				t.Fatalf("%s: not a YAML manifest", f)
			}
			text := string(mustRead(t, f))
			r := decodeRender(t, text)
			if len(r) == 0 {
				t.Fatal("no object")
			}
			kinds := map[string]bool{}
			for _, o := range r {
				kinds[o.raw["kind"].(string)] = true
			}
			for _, ek := range exampleKinds {
				if strings.Contains(filepath.Base(f), ek.word) && !kinds[ek.kind] {
					t.Errorf("its name says %s, yet it holds no %s (it holds %v)", ek.word, ek.kind, r.keys())
				}
			}
			var cfg *config.Config
			if o, ok := r[objectKey("ConfigMap", "capscale-system", "capscale-metrics-adapter-config")]; ok {
				cfg = adapterTakes(t, o.typed.(*corev1.ConfigMap))
			}
			for _, o := range r {
				if hpa, ok := o.typed.(*autoscalingv2.HorizontalPodAutoscaler); ok && kinds["ConfigMap"] {
					checkHPAHasPolicy(t, hpa, cfg)
				}
			}
			for _, m := range commandRE.FindAllStringSubmatch(text, -1) {
				checkPrints(t, m[1], r)
			}
		})
	}
}

// adapterTakes loads the config of an example's adapter ConfigMap as the
// metrics adapter does: decoded and validated, then each source built (which
// reads its tls.caFile), with the ConfigMap's keys as the files of the
// directory the adapter's Deployment mounts it at.
func adapterTakes(t *testing.T, cm *corev1.ConfigMap) *config.Config {
	t.Helper()
	d := get[*appsv1.Deployment](t, decodeRender(t, string(mustRead(t, "metrics-adapter/deployment.yaml"))),
		objectKey("Deployment", "capscale-system", "capscale-metrics-adapter"))
	var mount string
	for _, vm := range container(t, d, "metrics-adapter").VolumeMounts {
		if vm.Name == "config" {
			mount = vm.MountPath
		}
	}
	if mount == "" {
		t.Fatal("the adapter's Deployment mounts no volume config")
	}
	dir := t.TempDir()
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Decode([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the adapter refuses the config: %v", err)
	}
	inMount := func(p string) string {
		if rest, ok := strings.CutPrefix(p, mount+"/"); ok {
			return filepath.Join(dir, rest)
		}
		return p
	}
	for _, s := range cfg.Sources {
		s.TLS.CAFile = inMount(s.TLS.CAFile)
		s.BearerTokenFile = inMount(s.BearerTokenFile)
		if _, err := source.NewPoller(s, clocktesting.NewFakeClock(time.Now()), source.NewMetrics()); err != nil {
			t.Errorf("the adapter refuses source %s: %v", s.Name, err)
		}
	}
	return cfg
}

// checkHPAHasPolicy: an HPA on the load-step replica count names a workload
// that cfg has a step policy for, in the HPA's namespace.
func checkHPAHasPolicy(t *testing.T, hpa *autoscalingv2.HorizontalPodAutoscaler, cfg *config.Config) {
	t.Helper()
	for _, m := range hpa.Spec.Metrics {
		if m.External == nil || m.External.Metric.Selector == nil {
			continue
		}
		l := m.External.Metric.Selector.MatchLabels
		if m.External.Metric.Name != "capscale-desired-replicas" || l["policy"] != "load-step" {
			continue
		}
		found := false
		if cfg != nil {
			for _, sp := range cfg.StepPolicies {
				found = found || (sp.Workload.Namespace == hpa.Namespace && sp.Workload.Name == l["workload"])
			}
		}
		if !found {
			t.Errorf("HPA %s/%s follows the step policy of workload %s, which the file's config does not have", hpa.Namespace, hpa.Name, l["workload"])
		}
	}
}

// checkPrints runs `kubectl capscale ARGS` (as a user would, offline: a
// command in an example must not need a cluster) and compares the objects
// it prints with the example's.
func checkPrints(t *testing.T, args string, want rendered) {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	if err := kubectl.Execute(context.Background(), streams, strings.Fields(args)); err != nil {
		t.Fatalf("`kubectl capscale %s`: %v\n%s", args, err, errOut.String())
	}
	got := decodeRender(t, out.String())
	if !reflect.DeepEqual(got.keys(), want.keys()) {
		t.Fatalf("`kubectl capscale %s` prints %v, the file holds %v", args, got.keys(), want.keys())
	}
	for k, o := range got {
		if !reflect.DeepEqual(o.raw, want[k].raw) {
			t.Errorf("`kubectl capscale %s` prints %s as\n%v\nthe file holds\n%v", args, k, o.raw, want[k].raw)
		}
	}
}
