//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// operatorRoles: `kubectl capscale check` and `ips`, run through the real
// kubectl as a ServiceAccount bound only to deploy/kubectl/roles.yaml's
// ClusterRoles (capscale-kubectl:check in the namespace, capscale-kubectl:ips
// cluster-wide), pass: a probe pod placed by capscale-scheduler (or refused
// for want of IPs) and a metric read through the aggregator. Without
// check's Role, or with its pod rights only, check fails with the
// apiserver's words for the verb it lacks and the Role that grants it.
func operatorRoles(ctx context.Context, t *testing.T, s *stack.Stack, pluginDir string) {
	const ns = "kubectl-ops"
	operator := pluginRunnerRaw(s, pluginDir, kubectlUser(ctx, t, s, ns, "operator", "ClusterRole", "capscale-kubectl:ips", true))
	bind(ctx, t, s, ns, "operator-check", "ClusterRole", "capscale-kubectl:check", "operator")
	ipsOnly := pluginRunnerRaw(s, pluginDir, kubectlUser(ctx, t, s, ns, "viewer", "ClusterRole", "capscale-kubectl:ips", true))
	podsOnly := pluginRunnerRaw(s, pluginDir, kubectlUser(ctx, t, s, ns, "prober", "ClusterRole", "capscale-kubectl:ips", true))
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pods-only", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "delete"}}},
	}
	if _, err := s.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind(ctx, t, s, ns, "prober-pods-only", "Role", "pods-only", "prober")

	// A metric to read: the QPS policy's 800 / 500 is 2 replicas.
	dep := SimpleDeployment(ns, "web", 0, nil)
	dep.Annotations = map[string]string{names.SinglePodQPSAnnotation: "500", names.TotalQPSAnnotation: "800"}
	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// check reads it once: wait until the adapter has seen the Deployment.
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := s.Client.Discovery().RESTClient().Get().
			AbsPath("/apis/external.metrics.k8s.io/v1beta1/namespaces", ns, names.DesiredReplicasMetric).
			Param("labelSelector", "workload=web,policy=qps").DoRaw(ctx)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the adapter never answered for Deployment %s/web: %v", ns, err)
	}
	check := []string{"-n", ns, "--image", "registry.example/capscale:e2e", "--metric", names.DesiredReplicasMetric + ":workload=web,policy=qps"}

	out, err := operator(ctx, "check", "table", check...)
	t.Logf("kubectl capscale check as the operator:\n%s", out)
	if err != nil || !strings.Contains(out, "by capscale-scheduler") && !strings.Contains(out, "for want of underlay IPs") ||
		!strings.Contains(out, "external metric "+names.DesiredReplicasMetric+"{workload=web,policy=qps} in "+ns+": 2") || !strings.HasSuffix(strings.TrimSpace(out), "ok") {
		t.Errorf("check as a user bound to capscale-kubectl:check: %v\n%s", err, out)
	}
	if out, err := operator(ctx, "ips", "table"); err != nil || !strings.Contains(out, "CAPACITY") {
		t.Errorf("ips as a user bound to capscale-kubectl:ips: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		who    string
		run    func(ctx context.Context, verb, format string, args ...string) (string, error)
		lacks  string
		probed bool
	}{
		{who: "ips only", run: ipsOnly, lacks: `cannot create resource "pods"`},
		{who: "pod rights only", run: podsOnly, lacks: `cannot list resource "` + names.DesiredReplicasMetric + `" in API group "external.metrics.k8s.io"`, probed: true},
	} {
		out, err := tc.run(ctx, "check", "table", check...)
		t.Logf("kubectl capscale check with %s:\n%s", tc.who, out)
		if err == nil || !strings.Contains(out, tc.lacks) || !strings.Contains(out, "ClusterRole capscale-kubectl:check") {
			t.Errorf("check with %s: %v\n%s\nwant it to fail naming what it lacks (%s) and the Role that grants it", tc.who, err, out, tc.lacks)
		}
		if probed := strings.Contains(out, "pod "+ns+"/capscale-check-"); probed != tc.probed {
			t.Errorf("check with %s: the probe pod checked %t, want %t", tc.who, probed, tc.probed)
		}
	}
}
