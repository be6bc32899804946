package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/yaml"
)

// The two scheduling modes `kubectl apply -k deploy/` installs: extender
// mode as deploy/kustomization.yaml stands, plugin mode after the swap its
// comment describes.
var kustomizeModes = []string{"extender", "plugin"}

// kustomizeComponents are deploy/'s kustomize components (the directories
// whose kustomization.yaml is a Component), relative to deploy/.
func kustomizeComponents(t *testing.T) []string {
	t.Helper()
	var comps []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "helm" || path == "examples") {
			return filepath.SkipDir
		}
		if d.Name() == "kustomization.yaml" && strings.Contains(string(mustRead(t, path)), "\nkind: Component\n") {
			comps = append(comps, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) == 0 {
		t.Fatal("deploy/ has no kustomize component")
	}
	return comps
}

// kustomizeMode renders deploy/ as an operator edits it: a copy of deploy/
// whose kustomization.yaml is swapped to mode (the lines its comment names)
// and lists components. It returns kustomize's error rather than failing.
func kustomizeMode(t *testing.T, mode string, components ...string) (rendered, error) {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "helm" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, path), 0o750)
		}
		if !strings.HasSuffix(path, ".yaml") {
			return nil
		}
		return os.WriteFile(filepath.Join(dir, path), mustRead(t, path), 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	k := string(mustRead(t, "kustomization.yaml"))
	switch mode {
	case "extender":
	case "plugin":
		// "replace these two lines with plugin/capscale-scheduler.yaml"
		const extender = "- extender/rbac.yaml\n- scheduler/capscale-scheduler.yaml\n"
		if !strings.Contains(k, extender) {
			t.Fatalf("deploy/kustomization.yaml no longer has the two lines of extender mode:\n%s", extender)
		}
		k = strings.Replace(k, extender, "- plugin/capscale-scheduler.yaml\n", 1)
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	if len(components) > 0 {
		k += "components:\n- " + strings.Join(components, "\n- ") + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runDeployTool(t, "kubectl", "kustomize", dir)
	if err != nil {
		return nil, err
	}
	return decodeRender(t, out), nil
}

// componentNeeds are the components a component must follow, and onlyIn
// the mode outside which a component's render fails (a JSON patch test):
// capacity-sources/scheduler-reads makes plugin mode's capscale-scheduler
// read the sources capacity-sources configures; native turns extender
// mode's deploy/ into native mode, and capacity-sources/publisher-reads
// makes its publisher read the sources in the mirror's place.
var (
	componentNeeds = map[string][]string{
		"capacity-sources/scheduler-reads": {"capacity-sources"},
		"capacity-sources/publisher-reads": {"capacity-sources", "native"},
	}
	onlyIn = map[string]string{
		"capacity-sources/scheduler-reads": "plugin",
		"native":                           "extender",
		"capacity-sources/publisher-reads": "extender",
	}
)

// refused reports whether component c's render fails in mode.
func refused(c, mode string) bool {
	only, ok := onlyIn[c]
	return ok && only != mode
}

// allComponents lists every component of comps that renders in mode, each
// after the components it needs.
func allComponents(comps []string, mode string) []string {
	var list []string
	for _, c := range comps {
		if refused(c, mode) {
			continue
		}
		for _, n := range append(slices.Clone(componentNeeds[c]), c) {
			if !slices.Contains(list, n) {
				list = append(list, n)
			}
		}
	}
	return list
}

// TestComponentsEveryMode: each kustomize component of deploy/ renders in
// each mode deploy/kustomization.yaml offers, alone (after the components
// it needs) and with the others; one of another mode fails the render,
// and one listed without what it needs fails too.
func TestComponentsEveryMode(t *testing.T) {
	comps := kustomizeComponents(t)
	for _, mode := range kustomizeModes {
		for _, c := range append(slices.Clone(comps), "all") {
			t.Run(mode+"/"+c, func(t *testing.T) {
				list := append(slices.Clone(componentNeeds[c]), c)
				if c == "all" {
					list = allComponents(comps, mode)
				}
				_, err := kustomizeMode(t, mode, list...)
				if refused(c, mode) {
					if err == nil {
						t.Errorf("deploy/ in %s mode with %v renders; want it refused, the component is %s mode's", mode, list, onlyIn[c])
					}
					return
				}
				if err != nil {
					t.Errorf("deploy/ in %s mode with %v does not render: %v", mode, list, err)
				}
				if len(componentNeeds[c]) > 0 {
					if _, err := kustomizeMode(t, mode, c); err == nil {
						t.Errorf("deploy/ in %s mode with %s alone renders; want it refused without %v", mode, c, componentNeeds[c])
					}
				}
			})
		}
	}
}

// TestCapacitySourcesEveryMode: with deploy/capacity-sources, in each mode
// the controller mirrors and every component that counts IPs waits for the
// mirror: the extender with --await-capacity-source, the plugin with
// awaitCapacitySource: true in a configuration otherwise the one of
// deploy/plugin/capscale-scheduler.yaml; the workload API with the flag.
func TestCapacitySourcesEveryMode(t *testing.T) {
	const await = "--await-capacity-source"
	scheduler := objectKey("Deployment", "capscale-system", "capscale-scheduler")
	schedConfig := objectKey("ConfigMap", "capscale-system", "capscale-scheduler-config")
	for _, mode := range kustomizeModes {
		t.Run(mode, func(t *testing.T) {
			plain, err := kustomizeMode(t, mode)
			if err != nil {
				t.Fatal(err)
			}
			r, err := kustomizeMode(t, mode, "capacity-sources")
			if err != nil {
				t.Fatalf("deploy/capacity-sources does not render in %s mode: %v", mode, err)
			}
			ctrl := container(t, get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-controller")), "controller")
			if !slices.Contains(ctrl.Command, capacitySourcesFlag) {
				t.Errorf("the controller does not mirror: %v", ctrl.Command)
			}
			wl := container(t, get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-workload-api")), "workload-api")
			if !slices.Contains(wl.Command, await) {
				t.Errorf("the workload API does not wait for the mirror: %v", wl.Command)
			}
			d := get[*appsv1.Deployment](t, r, scheduler)
			want := get[*appsv1.Deployment](t, plain, scheduler)
			switch mode {
			case "extender":
				if c := container(t, d, "extender"); !slices.Contains(c.Command, await) {
					t.Errorf("the extender does not wait for the mirror: %v", c.Command)
				}
				want = want.DeepCopy()
				for i := range want.Spec.Template.Spec.Containers {
					if c := &want.Spec.Template.Spec.Containers[i]; c.Name == "extender" {
						c.Command = append(c.Command, await)
					}
				}
			case "plugin":
				got := pluginConfigMap(t, get[*corev1.ConfigMap](t, r, schedConfig))
				args := underlayIPArgs(t, got)
				if args["awaitCapacitySource"] != true {
					t.Errorf("the plugin's args %v: want awaitCapacitySource: true", args)
				}
				delete(args, "awaitCapacitySource")
				if w := pluginConfigMap(t, get[*corev1.ConfigMap](t, plain, schedConfig)); !reflect.DeepEqual(got, w) {
					t.Errorf("the component's plugin configuration differs from deploy/plugin/capscale-scheduler.yaml's but for awaitCapacitySource (- plugin, + component):\n%s", diff.Diff(w, got))
				}
			}
			// Nothing else of the scheduler changes.
			if !reflect.DeepEqual(d.Spec, want.Spec) {
				t.Errorf("the scheduler Deployment differs (- expected, + rendered):\n%s", diff.Diff(want.Spec, d.Spec))
			}
		})
	}
}

// pluginConfigMap decodes a scheduler ConfigMap's configuration generically.
func pluginConfigMap(t *testing.T, cm *corev1.ConfigMap) map[string]any {
	t.Helper()
	var c map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &c); err != nil {
		t.Fatal(err)
	}
	schedulerConfig(t, []byte(cm.Data["config.yaml"])) // and it decodes strictly
	return c
}

// underlayIPArgs are the UnderlayIP args of cfg's one profile, in place.
func underlayIPArgs(t *testing.T, cfg map[string]any) map[string]any {
	t.Helper()
	profiles, _ := cfg["profiles"].([]any)
	if len(profiles) != 1 {
		t.Fatalf("profiles %v: want one", profiles)
	}
	p, _ := profiles[0].(map[string]any)
	pcs, _ := p["pluginConfig"].([]any)
	for _, pc := range pcs {
		if m, _ := pc.(map[string]any); m["name"] == "UnderlayIP" {
			if args, ok := m["args"].(map[string]any); ok {
				return args
			}
		}
	}
	t.Fatalf("no UnderlayIP args in %v", p)
	return nil
}
