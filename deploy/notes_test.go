package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/mdheadings"
)

// The chart's own words to an operator (NOTES.txt after helm install, the
// refusal next to another adapter's APIService) name values to set, pages
// and sections to read, and files of this repository. These tests run each
// --set the text shows through the chart and look each reference up, so the
// text cannot promise what the chart refuses or point to nothing.

var (
	// docRefRE is a reference to a section: docs/keda.md "Heading" or
	// README "Heading".
	docRefRE = regexp.MustCompile(`\b((?:docs/[\w-]+|README|BENCHMARKS)(?:\.md)?) "([^"]+)"`)
	// repoPathRE is a path into the repository.
	repoPathRE = regexp.MustCompile(`(?:^|[\s(` + "`" + `])((?:deploy|docs|hack)/[\w./-]*[\w/])`)
)

// notesTemplate renders NOTES.txt into a ConfigMap: helm prints NOTES.txt
// only from install and upgrade, which need a cluster, and helm template
// leaves it out. tpl renders it with the same values, capabilities and
// helpers as helm install would.
const notesTemplate = `apiVersion: v1
kind: ConfigMap
metadata: {name: notes-under-test}
data:
  notes: {{ tpl (.Files.Get "notes-under-test.txt") . | toJson }}
`

// chartNotes returns the text helm install would print after installing
// the chart with args (as helmTemplate's, without a cluster).
func chartNotes(t *testing.T, args ...string) (string, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "capscale")
	if err := os.CopyFS(dir, os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	notes := filepath.Join(dir, "templates", "NOTES.txt")
	if err := os.Rename(notes, filepath.Join(dir, "notes-under-test.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "templates", "notes-under-test.yaml"), []byte(notesTemplate), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"template", "capscale", dir, "--show-only", "templates/notes-under-test.yaml"}, releaseNamespace(kubeArgs(t, args))...)
	out, err := runDeployTool(t, "helm", args...)
	if err != nil {
		return "", err
	}
	cm := get[*corev1.ConfigMap](t, decodeRender(t, out), objectKey("ConfigMap", "", "notes-under-test"))
	return cm.Data["notes"], nil
}

// kubeArgs are args with helmTemplate's default Kubernetes version and API
// versions in front, unless args give a version.
func kubeArgs(t *testing.T, args []string) []string {
	t.Helper()
	for _, a := range args {
		if a == "--kube-version" {
			return args
		}
	}
	return append([]string{"--kube-version", newestKubernetes(t), "--api-versions", mutatingAdmissionPolicyV1}, args...)
}

// TestNotesCommands: in each shape of install, every --set NOTES.txt shows
// is accepted by the chart on top of that install's values, and every
// section and file it points to exists.
func TestNotesCommands(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		// want is a phrase the notes must hold in this shape.
		want string
	}{
		{name: "default", want: "metricsAdapter.config"},
		{name: "extender mode", args: []string{"--set", "extender.mode=extender"}, want: "capscale-scheduler"},
		{name: "native mode", args: []string{"--set", "extender.mode=native", "--set", "extender.releaseFinalizer=true"}, want: "release-cleanup"},
		{name: "native mode without the finalizer", args: []string{"--set", "extender.mode=native", "--set", "extender.releaseFinalizer=false"}, want: "releaseFinalizer"},
		{name: "no APIService", args: []string{"--set", "apiService.create=false"}, want: "kedaScaler"},
		{name: "no APIService, KEDA's scaler", args: []string{"--set", "apiService.create=false", "--set", "metricsAdapter.kedaScaler.enabled=true",
			"--set-file", "metricsAdapter.kedaScaler.clientCA=" + ca}, want: "external scaler"},
		{name: "delegation", args: []string{"--set", "apiService.delegate=true"}, want: "apiService.delegate"},
		{name: "cert-manager", args: []string{"--set", "tls.certManager.enabled=true"}, want: "cert-manager"},
		{name: "monitoring", args: []string{"--set", "monitoring.serviceMonitor.enabled=true", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"}},
		{name: "before Kubernetes 1.36", args: []string{"--kube-version", "1.35.0"}, want: "admissionPolicies: skipped"},
		{name: "no scheduler, no workload API", args: []string{"--set", "extender.mode=extender", "--set", "extender.enabled=false", "--set", "workloadAPI.enabled=false"}},
		{name: "no scheduler in plugin mode", args: []string{"--set", "scheduler.enabled=false"}},
		{name: "extender.enabled=false in plugin mode", args: []string{"--set", "extender.enabled=false"}, want: "scheduler.enabled=false"},
		{name: "deprecated schedulerReplicas", args: []string{"--set", "extender.schedulerReplicas=3"}, want: "extender.replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			notes, err := chartNotes(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(notes, tc.want) {
				t.Errorf("the notes do not say %q:\n%s", tc.want, notes)
			}
			checkChartText(t, notes, tc.args)
		})
	}
}

// TestAPIServiceRefusalCommands: the refusal helm install prints when
// another adapter owns the external-metrics APIService (a lookup, so no
// render without a cluster reaches it) offers --set values the chart
// accepts, and docs/install.md quotes it as the chart says it.
func TestAPIServiceRefusalCommands(t *testing.T) {
	helpers := string(mustRead(t, "helm/capscale/templates/_helpers.tpl"))
	m := regexp.MustCompile(`fail \(printf "(\\n\\ncapscale: the APIService [^"\\]*(?:\\.[^"\\]*)*)"`).FindStringSubmatch(helpers)
	if m == nil {
		t.Fatal("_helpers.tpl has no refusal for another adapter's APIService")
	}
	const owner = "keda/keda-operator-metrics-apiserver"
	msg := strings.NewReplacer(`\n`, "\n", `\"`, `"`, "%s", owner).Replace(m[1])
	checkChartText(t, msg, nil)
	install := string(mustRead(t, "../docs/install.md"))
	for _, line := range strings.Split(strings.TrimSpace(msg), "\n") {
		if !strings.Contains(install, line) {
			t.Errorf("docs/install.md does not quote the refusal's line\n%s", line)
		}
	}
}

// checkChartText checks what text tells an operator: the --set, --set-file
// and --set-string values it shows render with the chart on top of base,
// its sections ("docs/x.md "Heading"") and paths exist.
func checkChartText(t *testing.T, text string, base []string) {
	t.Helper()
	flat := strings.Join(strings.Fields(text), " ")
	fields := strings.Fields(flat)
	var sets []string
	for i, f := range fields {
		flag, kv, inline := strings.Cut(f, "=")
		if flag != "--set" && flag != "--set-file" && flag != "--set-string" {
			continue
		}
		if !inline {
			if i+1 < len(fields) {
				kv = fields[i+1]
			} else {
				kv = ""
			}
		}
		kv = strings.TrimRight(kv, ".,;:)`")
		key, value, ok := strings.Cut(kv, "=")
		if !ok || !regexp.MustCompile(`^[A-Za-z][\w.]*$`).MatchString(key) || value == "" {
			t.Errorf("%s is not followed by KEY=VALUE (%q): a reader cannot run it", flag, kv)
			continue
		}
		if flag == "--set-file" {
			// The file the reader has: any text will do for the chart.
			value = filepath.Join(t.TempDir(), filepath.Base(value))
			if err := os.WriteFile(value, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		sets = append(sets, flag, key+"="+value)
	}
	if len(sets) > 0 {
		// On a cluster with prometheus-operator, which the text names for
		// the ServiceMonitor.
		sets = append(sets, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
		if _, err := helmTemplate(t, append(append([]string{}, base...), sets...)...); err != nil {
			t.Errorf("the chart refuses what the text says to set, %v: %v", sets, err)
		}
	}
	for _, m := range docRefRE.FindAllStringSubmatch(flat, -1) {
		page := m[1]
		if !strings.HasSuffix(page, ".md") {
			page += ".md"
		}
		headings, err := markdownHeadings(filepath.Join(repoRoot(t), page))
		if err != nil {
			t.Errorf("%s %q: %v", m[1], m[2], err)
			continue
		}
		found := false
		for _, h := range headings {
			found = found || h == m[2] || strings.HasPrefix(h, m[2]+" ") || strings.HasPrefix(h, m[2]+":")
		}
		if !found {
			t.Errorf("%s has no section %q (its sections: %v)", page, m[2], headings)
		}
	}
	for _, m := range repoPathRE.FindAllStringSubmatch(flat, -1) {
		if _, err := os.Stat(filepath.Join(repoRoot(t), m[1])); err != nil {
			t.Errorf("the text names %s, which the repository does not have", m[1])
		}
	}
}

// markdownHeadings are the headings of the Markdown file at path
// (mdheadings.Of).
func markdownHeadings(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return mdheadings.Of(string(b)), nil
}

// TestValuesComments: values.yaml's comments, which `helm show values`
// prints to an operator, hold only --set values the chart takes and
// sections and paths that exist.
func TestValuesComments(t *testing.T) {
	var comments []string
	for _, line := range strings.Split(string(mustRead(t, "helm/capscale/values.yaml")), "\n") {
		if _, c, ok := strings.Cut(line, "#"); ok {
			comments = append(comments, c)
		}
	}
	checkChartText(t, strings.Join(comments, "\n"), nil)
}
