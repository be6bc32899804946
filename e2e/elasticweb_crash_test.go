//go:build e2e

package e2e

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestElasticWebControllerCrash: capscale-controller killed with SIGKILL in
// the middle of a change completes it after a restart, and with two
// replicas the standby takes the Lease from a killed leader and completes
// the change the leader never applied. All state is in the apiserver: a new
// process re-lists and finishes what is left.
func TestElasticWebControllerCrash(t *testing.T) {
	s, _ := startAdapterStack(t, 0.5, func(o *stack.Options) {
		o.Controller = true
		o.ControllerArgs = fastLease
	})
	ctx := testContext(t, 10*time.Minute)
	c := &ewClient{t: t, s: s, dyn: dynamicClient(t, s)}
	deps, hpas := s.Client.AppsV1().Deployments(adapterNS), s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS)
	if out, err := c.apply(ctx, elasticWebManifest("shop", 500, 800)); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	c.waitStatus(ctx, "shop", 2*time.Minute, "2 ready, realQPS 1000", serving(2, 1000))
	reconciled := func(want func(*v1alpha1.ElasticWeb) bool) func(*v1alpha1.ElasticWeb) bool {
		return func(ew *v1alpha1.ElasticWeb) bool {
			return want(ew) && meta.IsStatusConditionTrue(ew.Status.Conditions, v1alpha1.ConditionReconciled)
		}
	}

	t.Run("killed with the change half applied: a restart completes it", func(t *testing.T) {
		// Without the right to patch HPAs, a change of the Deployment
		// (totalQPS) and the HPA (maxReplicas) stops half way: the
		// Deployment applied, the HPA refused. The kill lands there.
		restore := revokeControllerVerb(ctx, t, s, "autoscaling", "horizontalpodautoscalers", "patch")
		c.patchSpec(ctx, "shop", `{"totalQPS":1800,"maxReplicas":8}`)
		eventually(ctx, t, time.Minute, "the Deployment never got the new totalQPS", func(ctx context.Context) bool {
			d, err := deps.Get(ctx, "shop", metav1.GetOptions{})
			return err == nil && d.Annotations[names.TotalQPSAnnotation] == "1800"
		})
		eventually(ctx, t, time.Minute, "no ApplyFailed event for the HPA", func(ctx context.Context) bool {
			return hasEvent(ctx, s, "shop", v1alpha1.ReasonApplyFailed, "HorizontalPodAutoscaler")
		})
		if h, err := hpas.Get(ctx, "shop", metav1.GetOptions{}); err != nil || h.Spec.MaxReplicas != 10 {
			t.Fatalf("the HPA is not half way (maxReplicas still 10): %v %v", h.Spec.MaxReplicas, err)
		}
		s.Controller.Kill()
		restore()
		r, err := s.StartController(ctx, "controller-restarted")
		if err != nil {
			t.Fatal(err)
		}
		s.Controller = r
		eventually(ctx, t, time.Minute, "the restarted controller never applied the HPA", func(ctx context.Context) bool {
			h, err := hpas.Get(ctx, "shop", metav1.GetOptions{})
			return err == nil && h.Spec.MaxReplicas == 8
		})
		c.waitStatus(ctx, "shop", 2*time.Minute, "4 ready, realQPS 2000, Reconciled", reconciled(serving(4, 2000)))
	})

	t.Run("leader killed before it applied a change: the standby completes it", func(t *testing.T) {
		standby, err := s.StartController(ctx, "controller-standby")
		if err != nil {
			t.Fatal(err)
		}
		eventually(ctx, t, 30*time.Second, "the first replica does not lead", func(ctx context.Context) bool {
			return leading(ctx, s.Controller.URL) == 1 && leading(ctx, standby.URL) == 0
		})
		if n := metricSum(ctx, t, standby.URL, "capscale_controller_elasticweb_applies_total"); n != 0 {
			t.Fatalf("the standby applied %v times before it led", n)
		}
		// Frozen, the leader cannot act on the change; killed, it does not
		// release the Lease. The change exists only in the apiserver.
		if err := syscall.Kill(-s.Controller.Pid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		c.patchSpec(ctx, "shop", `{"totalQPS":2200}`)
		s.Controller.Kill()
		eventually(ctx, t, 30*time.Second, "the standby never took the Lease", func(ctx context.Context) bool {
			return leading(ctx, standby.URL) == 1
		})
		c.waitStatus(ctx, "shop", 2*time.Minute, "5 ready, realQPS 2500, Reconciled", reconciled(serving(5, 2500)))
		if n := metricSum(ctx, t, standby.URL, "capscale_controller_elasticweb_applies_total"); n < 1 {
			t.Errorf("the standby made no apply: the change was not its work")
		}
		s.Controller = standby
	})
}

// revokeControllerVerb takes verb on resource away from capscale-controller's
// ClusterRole and waits until the apiserver's authorizer says no; the
// returned func restores the role and waits until it says yes again.
func revokeControllerVerb(ctx context.Context, t *testing.T, s *stack.Stack, group, resource, verb string) (restore func()) {
	t.Helper()
	roles := s.Client.RbacV1().ClusterRoles()
	role, err := roles.Get(ctx, "capscale:controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig := role.DeepCopy().Rules
	cut := role.DeepCopy()
	for i, r := range cut.Rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
			cut.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == verb })
		}
	}
	if _, err := roles.Update(ctx, cut, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitControllerCan(ctx, t, s, group, resource, verb, false)
	return func() {
		t.Helper()
		r, err := roles.Get(ctx, "capscale:controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r.Rules = append([]rbacv1.PolicyRule(nil), orig...)
		if _, err := roles.Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitControllerCan(ctx, t, s, group, resource, verb, true)
	}
}

func waitControllerCan(ctx context.Context, t *testing.T, s *stack.Stack, group, resource, verb string, want bool) {
	t.Helper()
	eventually(ctx, t, 30*time.Second, "RBAC did not change for capscale-controller", func(ctx context.Context) bool {
		sar, err := s.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + stack.Namespace + ":capscale-controller",
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: adapterNS, Verb: verb, Group: group, Resource: resource,
			},
		}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed == want
	})
}
