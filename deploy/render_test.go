package deploy

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The chart and kustomize tests of this package run helm and kubectl on
// deploy/helm/capscale and on deploy/, deploy/monitoring/. They start no
// cluster; `make test-unit` links the two binaries into _output/bin first
// (`make deploy-tools`).

// renderedObject is one object of a render: its generic form, compared
// field by field, and its typed form, decoded strictly.
type renderedObject struct {
	raw   map[string]any
	typed runtime.Object // nil for kinds outside the scheme (ServiceMonitor)
}

// rendered maps "Kind namespace/name" to the object.
type rendered map[string]renderedObject

func objectKey(kind, namespace, name string) string { return kind + " " + namespace + "/" + name }

// repoRoot is the repository's root: go test runs this package in deploy/.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func chartDir(t *testing.T) string { return filepath.Join(repoRoot(t), "deploy", "helm", "capscale") }

// deployTool returns the path of helm or kubectl as `make deploy-tools`
// built them; nothing is downloaded at test time. A missing binary fails the
// test rather than skipping it: a skipped check would pass `go test ./...`
// while checking nothing.
func deployTool(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("CAPSCALE_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), "_output", "bin")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is not in %s: run `make deploy-tools` (make test-unit does it), or set CAPSCALE_BIN_DIR: %v", name, dir, err)
	}
	return p
}

// runDeployTool runs helm or kubectl in the repository root and returns its
// standard output; the error carries standard error.
func runDeployTool(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(deployTool(t, name), args...)
	cmd.Dir = repoRoot(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// decodeRender splits a multi-document render into objects, each decoded
// generically and, when its kind is in the scheme, strictly.
func decodeRender(t *testing.T, text string) rendered {
	t.Helper()
	dec := strictDecoder(t)
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

// dropCRDs removes the CustomResourceDefinitions: the chart ships them in
// its crds/ directory, which helm template leaves out (apis/capscale/v1alpha1's
// unit test keeps that directory equal to deploy/crd).
func (r rendered) dropCRDs() {
	for k, o := range r {
		if o.raw["kind"] == "CustomResourceDefinition" {
			delete(r, k)
		}
	}
}

// commonKeys reports each object the chart does not render and each it
// renders that want (what source describes) lacks, and returns the keys of
// the objects both have, sorted.
func commonKeys(t *testing.T, want, got rendered, source string) []string {
	t.Helper()
	var both []string
	for _, k := range want.keys() {
		if _, ok := got[k]; ok {
			both = append(both, k)
		} else {
			t.Errorf("the chart does not render %s", k)
		}
	}
	for _, k := range got.keys() {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart renders %s, which %s does not have", k, source)
		}
	}
	return both
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

// helmTemplate renders the chart with args; without --kube-version, as for
// the newest Kubernetes the project builds, which serves
// MutatingAdmissionPolicy v1: its version and that kind, as Argo CD passes
// the cluster's (a helm built from source would otherwise assume v1.20,
// below the chart's floor, and helm template knows no kinds); without
// --namespace, in capscale-system, as the docs install it.
func helmTemplate(t *testing.T, args ...string) (rendered, error) {
	t.Helper()
	if !slices.Contains(args, "--kube-version") {
		args = append([]string{"--kube-version", newestKubernetes(t), "--api-versions", mutatingAdmissionPolicyV1}, args...)
	}
	out, err := runDeployTool(t, "helm", append([]string{"template", "capscale", chartDir(t)}, releaseNamespace(args)...)...)
	if err != nil {
		return nil, err
	}
	return decodeRender(t, out), nil
}

// releaseNamespace is args with --namespace capscale-system in front
// unless they name a namespace: the chart's objects go in the release's
// namespace, and helm template's is "default".
func releaseNamespace(args []string) []string {
	if slices.Contains(args, "--namespace") || slices.Contains(args, "-n") {
		return args
	}
	return append([]string{"--namespace", "capscale-system"}, args...)
}

func kustomize(t *testing.T, dir string) rendered {
	t.Helper()
	out, err := runDeployTool(t, "kubectl", "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return decodeRender(t, out)
}
