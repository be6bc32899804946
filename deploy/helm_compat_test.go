package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestHelmSchedulerPerMinor: in plugin mode the chart runs the
// capscale-scheduler built for the cluster's minor (make release puts
// /capscale-scheduler-1.MINOR beside /capscale-scheduler, v1.37's, in the
// image); a minor it was not built for gets v1.37's.
func TestHelmSchedulerPerMinor(t *testing.T) {
	for _, tc := range []struct{ kube, want string }{
		{"1.35.8", "/capscale-scheduler-1.35"},
		{"1.36.5", "/capscale-scheduler-1.36"},
		{"1.37.2", "/capscale-scheduler"},
		{"1.38.0", "/capscale-scheduler"},
	} {
		t.Run(tc.kube, func(t *testing.T) {
			r, err := helmTemplate(t, "--set", "extender.mode=plugin", "--kube-version", tc.kube)
			if err != nil {
				t.Fatal(err)
			}
			d := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
			if c := container(t, d, "kube-scheduler"); len(c.Command) == 0 || c.Command[0] != tc.want || !slices.Contains(c.Command, "--config=/etc/capscale/config.yaml") {
				t.Errorf("command %v, want %s first", c.Command, tc.want)
			}
		})
	}
}

// TestHelmRefusesBelowFloor: Chart.yaml's kubeVersion is the oldest minor
// make test-compat passes, so Helm refuses an older cluster by name rather
// than install what that cluster cannot run.
func TestHelmRefusesBelowFloor(t *testing.T) {
	_, err := helmTemplate(t, "--kube-version", "1.34.9")
	if err == nil || !strings.Contains(err.Error(), "kubeVersion") || !strings.Contains(err.Error(), ">=1.35.0-0") {
		t.Fatalf("helm template --kube-version 1.34.9: %v, want Helm's refusal naming the chart's kubeVersion", err)
	}
	for _, v := range []string{"1.35.0", "v1.35.3-eks-4a1b2c"} {
		if _, err := helmTemplate(t, "--kube-version", v); err != nil {
			t.Errorf("helm template --kube-version %s: %v", v, err)
		}
	}
}

// mutatingAdmissionPolicyV1 is what a cluster serving MutatingAdmissionPolicy
// v1 (1.36+) lists, and Argo CD passes to helm template in --api-versions.
const mutatingAdmissionPolicyV1 = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"

// TestHelmAdmissionPoliciesWhereServed: the MutatingAdmissionPolicies are
// rendered only where the cluster serves admissionregistration.k8s.io/v1
// MutatingAdmissionPolicy (1.36+); on v1.35, which serves at most v1beta1
// behind a feature gate, the default install would otherwise fail on an
// unknown kind. helm template knows it only from --api-versions.
func TestHelmAdmissionPoliciesWhereServed(t *testing.T) {
	policies := []string{
		objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-ip"),
		objectKey("MutatingAdmissionPolicyBinding", "", "capscale-underlay-ip"),
		objectKey("MutatingAdmissionPolicy", "", "capscale-underlay-scheduler"),
		objectKey("MutatingAdmissionPolicyBinding", "", "capscale-underlay-scheduler"),
	}
	for _, tc := range []struct {
		kube, apis string
		want       bool
	}{
		{"1.35.0", "", false},
		{"1.35.8", "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy", false},
		{"1.36.0", "", false},
		{"1.36.0", mutatingAdmissionPolicyV1, true},
		{"1.37.0", mutatingAdmissionPolicyV1, true},
	} {
		t.Run(tc.kube+" "+tc.apis, func(t *testing.T) {
			args := []string{"--kube-version", tc.kube}
			if tc.apis != "" {
				args = append(args, "--api-versions", tc.apis)
			}
			r, err := helmTemplate(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range policies {
				if _, ok := r[k]; ok != tc.want {
					t.Errorf("%s rendered: %v, want %v", k, ok, tc.want)
				}
			}
		})
	}
}

// TestHelmKubeSchedulerFollowsMinor: in extender and native mode the stock
// kube-scheduler is the cluster's minor, at the patch the project builds and
// tests (the version-skew policy forbids one newer than the apiserver); an
// explicit tag wins. The chart's table is kept equal to the versions of
// e2e/tools/k8s-1.MINOR and go.mod.
func TestHelmKubeSchedulerFollowsMinor(t *testing.T) {
	built := builtKubernetesVersions(t)
	for _, mode := range []string{"extender", "native"} {
		for _, tc := range []struct{ kube, want string }{
			{"1.35.0", built["35"]},
			{"1.36.2", built["36"]},
			{"1.37.0", built["37"]},
			// One minor past the newest: the newest, which the policy allows.
			{"1.38.0", built["37"]},
		} {
			t.Run(mode+"/"+tc.kube, func(t *testing.T) {
				r, err := helmTemplate(t, "--set", "extender.mode="+mode, "--kube-version", tc.kube)
				if err != nil {
					t.Fatal(err)
				}
				d := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
				if c := container(t, d, "kube-scheduler"); c.Image != "registry.k8s.io/kube-scheduler:"+tc.want {
					t.Errorf("kube-scheduler image %s, want registry.k8s.io/kube-scheduler:%s", c.Image, tc.want)
				}
			})
		}
	}
	r, err := helmTemplate(t, "--kube-version", "1.35.0", "--set", "extender.mode=extender", "--set", "extender.kubeScheduler.image.tag=v1.35.1")
	if err != nil {
		t.Fatal(err)
	}
	d := get[*appsv1.Deployment](t, r, objectKey("Deployment", "capscale-system", "capscale-scheduler"))
	if c := container(t, d, "kube-scheduler"); c.Image != "registry.k8s.io/kube-scheduler:v1.35.1" {
		t.Errorf("with an explicit tag the image is %s", c.Image)
	}
}

// builtKubernetesVersions maps each minor to the Kubernetes version the
// project builds for it: e2e/tools/k8s-1.MINOR/go.mod's header (written by
// hack/compat/genmodule.sh) and e2e/tools/k8s/go.mod's k8s.io/kubernetes
// (the e2e planes' and the image's) for the newest.
func builtKubernetesVersions(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	header := regexp.MustCompile(`Builds Kubernetes (v1\.(\d+)\.\d+)'s`)
	dirs, err := filepath.Glob(filepath.Join(repoRoot(t), "e2e", "tools", "k8s-1.*", "go.mod"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no e2e/tools/k8s-1.*/go.mod: %v", err)
	}
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := header.FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s names no Kubernetes version in its header", f)
		}
		out[string(m[2])] = string(m[1])
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "e2e", "tools", "k8s", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^require k8s\.io/kubernetes (v1\.(\d+)\.\d+)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("e2e/tools/k8s/go.mod requires no k8s.io/kubernetes")
	}
	out[string(m[2])] = string(m[1])
	want := map[string]string{"35": "", "36": "", "37": ""}
	for minor := range want {
		if out[minor] == "" {
			t.Fatalf("no built Kubernetes version for 1.%s: %v", minor, out)
		}
	}
	return out
}

// newestKubernetes is the newest Kubernetes version the project builds.
func newestKubernetes(t *testing.T) string {
	t.Helper()
	newest, minor := "", 0
	for m, v := range builtKubernetesVersions(t) {
		if n, err := strconv.Atoi(m); err == nil && n > minor {
			newest, minor = v, n
		}
	}
	return newest
}
