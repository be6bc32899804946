package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// clusterSeenHelper is the chart's test of whether Helm sees the cluster
// (templates/_helpers.tpl); helm template renders its lookup empty.
const clusterSeenHelper = `{{- if lookup "v1" "Namespace" "" "kube-system" }}true{{ end -}}`

// helmTemplateSeen renders a copy of the chart whose clusterSeen is true,
// as helm install renders it, with no APIService found (lookups are empty):
// what `helm test` then runs.
func helmTemplateSeen(t *testing.T, args ...string) (rendered, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "capscale")
	if err := os.CopyFS(dir, os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	helpers := filepath.Join(dir, "templates", "_helpers.tpl")
	b, err := os.ReadFile(helpers)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), clusterSeenHelper) {
		t.Fatalf("_helpers.tpl no longer has %s: update this test", clusterSeenHelper)
	}
	if err := os.WriteFile(helpers, []byte(strings.Replace(string(b), clusterSeenHelper, "true", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runDeployTool(t, "helm", append([]string{"template", "capscale", dir}, releaseNamespace(kubeArgs(t, args))...)...)
	if err != nil {
		return nil, err
	}
	return decodeRender(t, out), nil
}

// TestHelmTestHook (issue 57 §1): helm test runs `kubectl capscale check`
// in the release's namespace as its own ServiceAccount, whose Role holds
// only what the checks of this install need (pods to create, read and
// delete for the scheduling check; list on capscale-load-index for the
// metrics), every object a test hook removed once it passed; the command
// reads each configured source, and leaves out what the install does not
// serve. helm template, which cannot see the cluster, renders none of it
// (the chart's other hooks' rule).
func TestHelmTestHook(t *testing.T) {
	sources := writeValues(t, `
metricsAdapter:
  config:
    sources:
    - {name: shop-load, url: "http://load.example/", jsonPath: "{.v}", interval: 2s, timeout: 1s, maxAge: 30s}
    - {name: web-load, url: "http://web.example/", jsonPath: "{.v}", interval: 2s, timeout: 1s, maxAge: 30s}
`)
	podKey := objectKey("Pod", "infra", "capscale-test")
	roleKey := objectKey("Role", "infra", "capscale-test")
	for _, tc := range []struct {
		name     string
		args     []string
		wantArgs []string
		rules    []rbacv1.PolicyRule
	}{{
		name:     "plugin mode with sources",
		args:     []string{"-f", sources},
		wantArgs: []string{"--image=ghcr.io/capscale/capscale:v0.1.0", "--metric=capscale-load-index:source=shop-load", "--metric=capscale-load-index:source=web-load"},
		rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "delete"}},
			{APIGroups: []string{"external.metrics.k8s.io"}, Resources: []string{"capscale-load-index"}, Verbs: []string{"list"}},
		},
	}, {
		name:     "no sources: the metric list, which discovery grants",
		args:     []string{"--set", "extender.mode=native"},
		wantArgs: []string{"--image=ghcr.io/capscale/capscale:v0.1.0"},
		rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "delete"}},
		},
	}, {
		name:     "no scheduler, no APIService",
		args:     []string{"--set", "scheduler.enabled=false", "--set", "apiService.create=false"},
		wantArgs: []string{"--scheduler-name=", "--external-metrics=false"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplateSeen(t, append([]string{"--namespace", "infra"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			pod := get[*corev1.Pod](t, r, podKey)
			if pod.Annotations["helm.sh/hook"] != "test" || pod.Spec.ServiceAccountName != "capscale-test" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("the test pod: hook %q, ServiceAccount %q, restartPolicy %q", pod.Annotations["helm.sh/hook"], pod.Spec.ServiceAccountName, pod.Spec.RestartPolicy)
			}
			want := append([]string{"/kubectl-capscale", "check", "--namespace=infra"}, tc.wantArgs...)
			if got := pod.Spec.Containers[0].Command; !slices.Equal(got, want) {
				t.Errorf("the test runs %q, want %q", got, want)
			}
			role := get[*rbacv1.Role](t, r, roleKey)
			if !equalRules(role.Rules, tc.rules) {
				t.Errorf("Role rules %+v, want %+v", role.Rules, tc.rules)
			}
			for _, k := range []string{podKey, roleKey, objectKey("RoleBinding", "infra", "capscale-test"), objectKey("ServiceAccount", "infra", "capscale-test")} {
				meta, _ := r[k].raw["metadata"].(map[string]any)
				ann, _ := meta["annotations"].(map[string]any)
				if ann["helm.sh/hook"] != "test" || ann["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
					t.Errorf("%s: annotations %v, want a test hook deleted once it passed", k, ann)
				}
			}
		})
	}
	r, err := helmTemplate(t, "-f", sources)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range r.keys() {
		if strings.Contains(k, "capscale-test") {
			t.Errorf("helm template renders %s, which only helm install (seeing the cluster) may", k)
		}
	}
}

func equalRules(a, b []rbacv1.PolicyRule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !slices.Equal(a[i].APIGroups, b[i].APIGroups) || !slices.Equal(a[i].Resources, b[i].Resources) ||
			!slices.Equal(a[i].Verbs, b[i].Verbs) || len(a[i].ResourceNames) != 0 || len(b[i].ResourceNames) != 0 {
			return false
		}
	}
	return true
}
