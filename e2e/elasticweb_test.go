//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// Short lease timings, so that a standby takes over within seconds.
var fastLease = []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s", "--max-retry-delay=2s"}

// ewClient reads and writes ElasticWebs as the admin (a user).
type ewClient struct {
	t   *testing.T
	s   *stack.Stack
	dyn dynamic.Interface
}

func (c *ewClient) get(ctx context.Context, name string) (*v1alpha1.ElasticWeb, error) {
	u, err := c.dyn.Resource(v1alpha1.ElasticWebResource).Namespace(adapterNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	ew := &v1alpha1.ElasticWeb{}
	return ew, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ew)
}

// apply is `kubectl apply -f` of a manifest, as a newcomer would.
func (c *ewClient) apply(ctx context.Context, manifest string) (string, error) {
	f := filepath.Join(c.t.TempDir(), "ew.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return c.s.Kubectl(ctx, "apply", "-n", adapterNS, "-f", f)
}

func (c *ewClient) patchSpec(ctx context.Context, name, spec string) {
	c.t.Helper()
	_, err := c.dyn.Resource(v1alpha1.ElasticWebResource).Namespace(adapterNS).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":`+spec+`}`), metav1.PatchOptions{})
	if err != nil {
		c.t.Fatalf("patching ElasticWeb %s: %v", name, err)
	}
}

// waitStatus polls the ElasticWeb until ok holds for its status.
func (c *ewClient) waitStatus(ctx context.Context, name string, timeout time.Duration, what string, ok func(*v1alpha1.ElasticWeb) bool) *v1alpha1.ElasticWeb {
	c.t.Helper()
	var last *v1alpha1.ElasticWeb
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ew, err := c.get(ctx, name)
		if err != nil {
			return false, nil
		}
		last = ew
		return ok(ew), nil
	})
	if err != nil {
		c.t.Fatalf("ElasticWeb %s: %s never held: %v; last status %+v", name, what, err, statusOf(last))
	}
	return last
}

func statusOf(ew *v1alpha1.ElasticWeb) any {
	if ew == nil {
		return nil
	}
	return ew.Status
}

func elasticWebManifest(name string, single, total float64) string {
	return fmt.Sprintf(`apiVersion: capscale.io/v1alpha1
kind: ElasticWeb
metadata:
  name: %s
spec:
  image: registry.example/shop:1
  port: 8080
  singlePodQPS: %v
  totalQPS: %v
`, name, single, total)
}

func serving(ready int32, realQPS float64) func(*v1alpha1.ElasticWeb) bool {
	return func(ew *v1alpha1.ElasticWeb) bool {
		return ew.Status.ObservedGeneration == ew.Generation && ew.Status.DesiredReplicas == ready &&
			ew.Status.ReadyReplicas == ready && ew.Status.RealQPS == realQPS
	}
}

// eventually polls cond for up to timeout, failing with what.
func eventually(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return cond(ctx), nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func hasEvent(ctx context.Context, s *stack.Stack, name, reason, contains string) bool {
	l, err := s.Client.CoreV1().Events(adapterNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ElasticWeb,involvedObject.name=" + name})
	if err != nil {
		return false
	}
	for _, e := range l.Items {
		if e.Reason == reason && strings.Contains(e.Message, contains) && e.Source.Component == "capscale-controller" {
			return true
		}
	}
	return false
}

// TestElasticWebResource runs issue 13's scenarios: capscale-controller as
// its own ServiceAccount, the HPA driven by the real HPA controller through
// the adapter behind the real APIService, kubectl as the user. Crash and
// failover are TestElasticWebControllerCrash.
func TestElasticWebResource(t *testing.T) {
	s, _ := startAdapterStack(t, 0.5, func(o *stack.Options) {
		o.Controller = true
		o.ControllerArgs = fastLease
	})
	ctx := testContext(t, 10*time.Minute)
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	c := &ewClient{t: t, s: s, dyn: dyn}
	deps, svcs, hpas := s.Client.AppsV1().Deployments(adapterNS), s.Client.CoreV1().Services(adapterNS), s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS)

	t.Run("800/500 gives 2 ready and REAL-QPS 1000", func(t *testing.T) {
		if out, err := c.apply(ctx, elasticWebManifest("shop", 500, 800)); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		ew := c.waitStatus(ctx, "shop", 2*time.Minute, "2 ready, realQPS 1000", serving(2, 1000))
		if ew.Status.QPSReplicas != 2 || ew.Status.NodePort == 0 {
			t.Errorf("status %+v, want qpsReplicas 2 and a node port", ew.Status)
		}
		for _, cond := range []string{v1alpha1.ConditionReconciled, v1alpha1.ConditionReady} {
			if !meta.IsStatusConditionTrue(ew.Status.Conditions, cond) {
				t.Errorf("condition %s not True: %+v", cond, ew.Status.Conditions)
			}
		}
		d, err := deps.Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ref := metav1.GetControllerOf(d); ref == nil || ref.UID != ew.UID || d.Annotations[names.TotalQPSAnnotation] != "800" {
			t.Errorf("Deployment owner %+v, annotations %v", ref, d.Annotations)
		}
		h, err := hpas.Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if m := h.Spec.Metrics[0].External; m == nil || m.Metric.Name != names.DesiredReplicasMetric || m.Metric.Selector.MatchLabels["policy"] != names.PolicyQPS {
			t.Errorf("HPA metrics %+v", h.Spec.Metrics)
		}
		out, err := s.Kubectl(ctx, "get", "elasticwebs", "-n", adapterNS)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl get elasticwebs:\n%s", out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME IMAGE TOTAL-QPS REPLICAS READY REAL-QPS AGE" ||
			!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "shop registry.example/shop:1 800 2 2 1000 ") {
			t.Errorf("kubectl get elasticwebs printed:\n%s", out)
		}
		if out, err := s.Kubectl(ctx, "explain", "elasticweb.spec.singlePodQPS"); err != nil || !strings.Contains(out, "The QPS one pod serves") {
			t.Errorf("kubectl explain: %v\n%s", err, out)
		}
		// In shape, the controller writes nothing, though the HPA and the
		// pods keep the Deployment's events coming.
		before := metricSum(ctx, t, s.Controller.URL, "capscale_controller_elasticweb_applies_total")
		reconciles := metricSum(ctx, t, s.Controller.URL, "capscale_controller_elasticweb_reconciles_total")
		time.Sleep(5 * time.Second)
		if after := metricSum(ctx, t, s.Controller.URL, "capscale_controller_elasticweb_applies_total"); after != before {
			t.Errorf("an ElasticWeb in shape was applied %v more times", after-before)
		}
		t.Logf("reconciles while in shape: %v", metricSum(ctx, t, s.Controller.URL, "capscale_controller_elasticweb_reconciles_total")-reconciles)
	})

	t.Run("totalQPS 1800 gives 4", func(t *testing.T) {
		c.patchSpec(ctx, "shop", `{"totalQPS":1800}`)
		ew := c.waitStatus(ctx, "shop", 2*time.Minute, "4 ready, realQPS 2000", serving(4, 2000))
		if ew.Status.QPSReplicas != 4 {
			t.Errorf("qpsReplicas %d, want 4", ew.Status.QPSReplicas)
		}
	})

	t.Run("a deleted Service comes back", func(t *testing.T) {
		old, err := svcs.Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := svcs.Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(ctx, t, time.Minute, "the Service was not re-created", func(ctx context.Context) bool {
			svc, err := svcs.Get(ctx, "shop", metav1.GetOptions{})
			return err == nil && svc.UID != old.UID && svc.Spec.Ports[0].Port == 8080
		})
		eventually(ctx, t, 30*time.Second, "no Created event for the Service", func(ctx context.Context) bool {
			return hasEvent(ctx, s, "shop", "Created", "Created Service shop")
		})
	})

	t.Run("an image changed by hand is reverted", func(t *testing.T) {
		if out, err := s.Kubectl(ctx, "set", "image", "-n", adapterNS, "deployment/shop", "web=registry.example/evil:6"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		eventually(ctx, t, time.Minute, "the image was not reverted", func(ctx context.Context) bool {
			d, err := deps.Get(ctx, "shop", metav1.GetOptions{})
			return err == nil && d.Spec.Template.Spec.Containers[0].Image == "registry.example/shop:1"
		})
		eventually(ctx, t, 30*time.Second, "no Updated event saying Reverted", func(ctx context.Context) bool {
			return hasEvent(ctx, s, "shop", "Updated", "Reverted Deployment shop")
		})
	})

	t.Run("an invalid spec is refused naming the field", func(t *testing.T) {
		for _, tc := range []struct{ manifest, field string }{
			{elasticWebManifest("bad", 0, 10), "spec.singlePodQPS"},
			{elasticWebManifest("bad", 10, -1), "spec.totalQPS"},
			{strings.Replace(elasticWebManifest("bad", 10, 10), "port: 8080", "port: 70000", 1), "spec.port"},
			{elasticWebManifest("bad", 10, 10) + "  minReplicas: 5\n  maxReplicas: 3\n", "spec.maxReplicas"},
		} {
			out, err := c.apply(ctx, tc.manifest)
			if err == nil || !strings.Contains(out, tc.field) {
				t.Errorf("want a refusal naming %s, got %v:\n%s", tc.field, err, out)
			}
		}
		if _, err := c.get(ctx, "bad"); !apierrors.IsNotFound(err) {
			t.Errorf("an invalid ElasticWeb was stored: %v", err)
		}
	})

	t.Run("an object it did not create is left alone", func(t *testing.T) {
		foreign := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: adapterNS, Labels: map[string]string{"team": "other"}},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9999}}},
		}
		if _, err := svcs.Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if out, err := c.apply(ctx, elasticWebManifest("taken", 100, 100)); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		c.waitStatus(ctx, "taken", time.Minute, "Reconciled=False ObjectConflict", func(ew *v1alpha1.ElasticWeb) bool {
			cond := meta.FindStatusCondition(ew.Status.Conditions, v1alpha1.ConditionReconciled)
			return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == v1alpha1.ReasonObjectConflict &&
				strings.Contains(cond.Message, "Service "+adapterNS+"/taken exists and was not created by this ElasticWeb")
		})
		eventually(ctx, t, 30*time.Second, "no ObjectConflict event", func(ctx context.Context) bool {
			return hasEvent(ctx, s, "taken", v1alpha1.ReasonObjectConflict, "Service "+adapterNS+"/taken")
		})
		// Hold: the Service stays as its owner made it.
		time.Sleep(3 * time.Second)
		svc, err := svcs.Get(ctx, "taken", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(svc.OwnerReferences) != 0 || svc.Labels[names.ElasticWebLabel] != "" || svc.Spec.Ports[0].Port != 9999 || len(svc.Spec.Selector) != 0 {
			t.Errorf("capscale changed a Service it did not create: %+v", svc)
		}
		// Its other objects are made; once the Service goes, it is made too.
		if _, err := deps.Get(ctx, "taken", metav1.GetOptions{}); err != nil {
			t.Errorf("Deployment of the blocked ElasticWeb: %v", err)
		}
		if err := svcs.Delete(ctx, "taken", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c.waitStatus(ctx, "taken", time.Minute, "Reconciled=True after the Service went", func(ew *v1alpha1.ElasticWeb) bool {
			return meta.IsStatusConditionTrue(ew.Status.Conditions, v1alpha1.ConditionReconciled)
		})
	})

	t.Run("deleting the ElasticWeb removes its objects", func(t *testing.T) {
		if out, err := s.Kubectl(ctx, "delete", "elasticweb", "-n", adapterNS, "shop"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		eventually(ctx, t, 2*time.Minute, "the garbage collector left objects behind", func(ctx context.Context) bool {
			_, e1 := deps.Get(ctx, "shop", metav1.GetOptions{})
			_, e2 := svcs.Get(ctx, "shop", metav1.GetOptions{})
			_, e3 := hpas.Get(ctx, "shop", metav1.GetOptions{})
			return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2) && apierrors.IsNotFound(e3)
		})
	})
}

// leading reads capscale_controller_leader from a replica: 1, 0, or -1 when
// unreadable.
func leading(ctx context.Context, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		switch line {
		case "capscale_controller_leader 1":
			return 1
		case "capscale_controller_leader 0":
			return 0
		}
	}
	return -1
}

// metricSum adds up every sample of a metric on a replica's /metrics.
func metricSum(ctx context.Context, t *testing.T, url, name string) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}
