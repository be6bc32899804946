//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// apiClient calls the workload API as one bearer token.
type apiClient struct {
	t     *testing.T
	s     *stack.Stack
	http  *http.Client
	token string
}

// do sends a request and decodes the JSON answer into out (if not nil).
func (c *apiClient) do(ctx context.Context, method, path string, body any, out any) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.s.WorkloadAPIURL+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %d, undecodable body %q: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	c.t.Logf("%s %s -> %d %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	return resp.StatusCode
}

type apiError struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// TestWorkloadAPI runs issue 5's and issue 12's scenarios against the API
// process, with real tokens, real RBAC, a real admission policy and audit
// log, and the adapter behind the real APIService. The API acts with each
// caller's token; its own ServiceAccount has only the read RBAC of deploy/.
func TestWorkloadAPI(t *testing.T) {
	s, _ := startAdapterStack(t, 0.5, func(o *stack.Options) { o.WorkloadAPI = true; o.Controller = true })
	ctx := testContext(t, 10*time.Minute)
	const ns = adapterNS
	hc, err := s.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}

	// A console with edit rights; a scaler with only the example scale Role
	// and a stopper with only the stop Role (deploy/workload-api/roles.yaml).
	if _, err := s.Kubectl(ctx, "apply", "-f", stack.DeployFile("workload-api/roles.yaml")); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		tok, err := s.ServiceAccountToken(ctx, ns, sa)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	consoleToken, scalerToken, stopperToken := token("console"), token("scaler"), token("stopper")
	bind(ctx, t, s, ns, "console-edit", "ClusterRole", "edit", "console")
	bind(ctx, t, s, ns, "scaler-scale", "ClusterRole", "capscale-workload:scale", "scaler")
	bind(ctx, t, s, ns, "stopper-stop-start", "ClusterRole", "capscale-workload:stop-start", "stopper")
	anon := &apiClient{t: t, s: s, http: hc}
	console := &apiClient{t: t, s: s, http: hc, token: consoleToken}
	scaler := &apiClient{t: t, s: s, http: hc, token: scalerToken}
	stopper := &apiClient{t: t, s: s, http: hc, token: stopperToken}

	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, "app", 3, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	WaitForRunningPods(ctx, t, s.Plane, ns, "app=app", 3)
	base := "/v1/namespaces/" + ns + "/deployments/app"

	t.Run("no token is 401", func(t *testing.T) {
		var e apiError
		if code := anon.do(ctx, "POST", base+"/stop", nil, &e); code != 401 || e.Reason != "Unauthorized" {
			t.Errorf("got %d %+v, want 401 Unauthorized", code, e)
		}
		if code := (&apiClient{t: t, s: s, http: hc, token: "not-a-token"}).do(ctx, "POST", base+"/stop", nil, &e); code != 401 {
			t.Errorf("a bad token got %d, want 401", code)
		}
	})
	t.Run("scale Role: scale 200, stop and restart 403 and nothing changes", func(t *testing.T) {
		before, err := s.Client.AppsV1().Deployments(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var e apiError
		if code := scaler.do(ctx, "POST", base+"/restart", nil, &e); code != 403 || e.Reason != "Forbidden" || !strings.Contains(e.Message, "system:serviceaccount:"+ns+":scaler") {
			t.Errorf("restart as scaler: %d %+v, want the apiserver's 403 naming the scaler", code, e)
		}
		if code := scaler.do(ctx, "POST", base+"/stop", nil, &e); code != 403 || e.Reason != "Forbidden" {
			t.Errorf("stop as scaler: %d %+v, want 403: stop writes the deployment's metadata", code, e)
		}
		after, err := s.Client.AppsV1().Deployments(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d := deploymentWrites(before, after); d != "" {
			t.Errorf("refused calls changed the deployment: %s", d)
		}
		if code := scaler.do(ctx, "PUT", base+"/scale", map[string]int32{"replicas": 2}, nil); code != 200 {
			t.Errorf("scale as scaler: %d, want 200", code)
		}
		WaitForRunningPods(ctx, t, s.Plane, ns, "app=app", 2)
		if code := scaler.do(ctx, "PUT", base+"/scale", map[string]int32{"replicas": 3}, nil); code != 200 {
			t.Errorf("scale back as scaler: %d, want 200", code)
		}
		WaitForRunningPods(ctx, t, s.Plane, ns, "app=app", 3)
	})
	t.Run("stop Role: stop 200", func(t *testing.T) {
		if code := stopper.do(ctx, "POST", base+"/stop", nil, nil); code != 200 {
			t.Errorf("stop as stopper: %d, want 200", code)
		}
		WaitForRunningPods(ctx, t, s.Plane, ns, "app=app", 0)
	})
	t.Run("stop again keeps the remembered count, start restores it", func(t *testing.T) {
		var stop struct {
			RememberedReplicas *int32 `json:"rememberedReplicas"`
			AlreadyStopped     bool   `json:"alreadyStopped"`
		}
		if code := console.do(ctx, "POST", base+"/stop", nil, &stop); code != 200 || !stop.AlreadyStopped {
			t.Errorf("second stop: %d %+v, want 200 and alreadyStopped", code, stop)
		}
		d, err := s.Client.AppsV1().Deployments(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Annotations[names.ReplicasBeforeStopAnnotation]; got != "3" {
			t.Errorf("remembered count %q after two stops, want 3", got)
		}
		if code := console.do(ctx, "POST", base+"/start", nil, nil); code != 200 {
			t.Fatalf("start: %d", code)
		}
		WaitForRunningPods(ctx, t, s.Plane, ns, "app=app", 3)
		d, err = s.Client.AppsV1().Deployments(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := d.Annotations[names.ReplicasBeforeStopAnnotation]; ok {
			t.Errorf("start left the %s annotation", names.ReplicasBeforeStopAnnotation)
		}
	})
	t.Run("two restarts within one second are two rollouts", func(t *testing.T) {
		before := replicaSetCount(ctx, t, s, ns, "app=app")
		var r1, r2 struct {
			RestartedAt string `json:"restartedAt"`
		}
		start := time.Now()
		if code := console.do(ctx, "POST", base+"/restart", nil, &r1); code != 202 {
			t.Fatalf("restart 1: %d", code)
		}
		if code := console.do(ctx, "POST", base+"/restart", nil, &r2); code != 202 {
			t.Fatalf("restart 2: %d", code)
		}
		if el := time.Since(start); el >= time.Second {
			t.Logf("the two restarts took %v; the check still holds but is weaker", el)
		}
		if r1.RestartedAt == r2.RestartedAt {
			t.Errorf("both restarts stamped %q", r1.RestartedAt)
		}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return replicaSetCount(ctx, t, s, ns, "app=app") >= before+2, nil
		})
		if err != nil {
			t.Errorf("want two new ReplicaSets after two restarts, have %d more", replicaSetCount(ctx, t, s, ns, "app=app")-before)
		}
		var st struct {
			Complete bool `json:"complete"`
		}
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return console.do(ctx, "GET", base+"/rollout", nil, &st) == 200 && st.Complete, nil
		})
		if err != nil {
			t.Errorf("rollout never reported complete")
		}
	})
	t.Run("HPA-managed: stop disables the HPA, start restores within its max", func(t *testing.T) {
		dep := SimpleDeployment(ns, "managed", 4, nil)
		dep.Annotations = map[string]string{names.SinglePodQPSAnnotation: "100", names.TotalQPSAnnotation: "350"}
		if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, desiredReplicasHPA("managed", names.PolicyQPS, 1, 4), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitReplicas(ctx, t, s, "managed", 4, time.Minute, nil, nil)
		// A stale remembered count above the HPA's max: start must cap it.
		if code := console.do(ctx, "POST", "/v1/namespaces/"+ns+"/deployments/managed/stop", nil, nil); code != 200 {
			t.Fatalf("stop: %d", code)
		}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			h, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "managed", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range h.Status.Conditions {
				if c.Type == autoscalingv2.ScalingActive && c.Status == corev1.ConditionFalse && c.Reason == "ScalingDisabled" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("the HPA never reported ScalingDisabled after stop")
		}
		holdReplicas(ctx, t, s, "managed", 0, 5*time.Second)
		var start struct {
			Replicas int32  `json:"replicas"`
			Message  string `json:"message"`
		}
		if code := console.do(ctx, "POST", "/v1/namespaces/"+ns+"/deployments/managed/start", map[string]int32{"replicas": 9}, &start); code != 200 {
			t.Fatalf("start: %d", code)
		}
		if start.Replicas != 4 {
			t.Errorf("start asked for 9 with an HPA max of 4 restored %d, want 4 (%s)", start.Replicas, start.Message)
		}
		waitReplicas(ctx, t, s, "managed", 4, time.Minute, nil, nil)

		// Scaling an HPA-managed workload: refused, unless asked to move the
		// HPA's bounds (which needs the caller's own update on HPAs).
		var e apiError
		scalePath := "/v1/namespaces/" + ns + "/deployments/managed/scale"
		if code := console.do(ctx, "PUT", scalePath, map[string]int32{"replicas": 6}, &e); code != 409 {
			t.Errorf("scale of an HPA-managed Deployment: %d %+v, want 409", code, e)
		}
		if code := console.do(ctx, "PUT", scalePath+"?adjustHPA=true", map[string]int32{"replicas": 6}, nil); code != 200 {
			t.Fatalf("scale with adjustHPA: %d, want 200", code)
		}
		h, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "managed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h.Spec.MaxReplicas < 6 {
			t.Errorf("adjustHPA left the HPA's max at %d, want it to include 6", h.Spec.MaxReplicas)
		}
	})
	// The elastic web routes write and read the ElasticWeb resource as the
	// caller; capscale-controller does the rest. "web" holds only the
	// capscale-workload:elasticweb Role: no right on Deployments, Services
	// or HPAs.
	bind(ctx, t, s, ns, "web-elasticweb", "ClusterRole", "capscale-workload:elasticweb", "web")
	web := &apiClient{t: t, s: s, http: hc, token: token("web")}
	ewPath := "/v1/namespaces/" + ns + "/elasticwebs/"
	t.Run("elasticweb PUT writes the resource; the controller reaches ceil(total/single) through the adapter", func(t *testing.T) {
		var got elasticWebAnswer
		if code := web.do(ctx, "PUT", ewPath+"shop", map[string]any{"image": "registry.example/web:2", "port": 8080, "singlePodQPS": 500, "totalQPS": 1800}, &got); code != 200 {
			t.Fatalf("PUT: %d", code)
		}
		if got.Generation != 1 || got.Spec.TotalQPS != 1800 || got.Spec.MinReplicas == nil || *got.Spec.MinReplicas != 1 {
			t.Errorf("PUT answered %+v, want generation 1 and the CRD's default minReplicas 1", got)
		}
		ew, err := (&ewClient{t: t, s: s, dyn: dynamicClient(t, s)}).get(ctx, "shop")
		if err != nil {
			t.Fatal(err)
		}
		if m := applyManagers(ew.ManagedFields); !m[names.WorkloadAPIFieldManager] || m[names.FieldManager] {
			t.Errorf("spec managers %v, want %s's apply and not the controller's", m, names.WorkloadAPIFieldManager)
		}
		waitReplicas(ctx, t, s, "shop", 4, 2*time.Minute, nil, nil)
		d, err := s.Client.AppsV1().Deployments(ns).Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ref := metav1.GetControllerOf(d); ref == nil || ref.Kind != "ElasticWeb" || ref.UID != ew.UID {
			t.Errorf("the Deployment's controller is %+v, want the ElasticWeb", ref)
		}
		for _, get := range []func() error{
			func() error {
				_, err := s.Client.CoreV1().Services(ns).Get(ctx, "shop", metav1.GetOptions{})
				return err
			},
			func() error {
				_, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "shop", metav1.GetOptions{})
				return err
			},
		} {
			if err := get(); err != nil {
				t.Errorf("the controller's object: %v", err)
			}
		}
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return web.do(ctx, "GET", ewPath+"shop", nil, &got) == 200 && got.Status.ObservedGeneration == got.Generation && got.Status.ReadyReplicas == 4, nil
		})
		if err != nil || got.Status.RealQPS != 2000 || got.Status.QPSReplicas != 4 || got.Status.DesiredReplicas != 4 {
			t.Errorf("GET status %+v, want 4 ready and real QPS 2000: %v", got.Status, err)
		}
	})
	t.Run("elasticweb PUT: the apiserver's validation names the field", func(t *testing.T) {
		for _, tc := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"image": "x", "port": 8080, "singlePodQPS": 0, "totalQPS": 10}, "spec.singlePodQPS"},
			{map[string]any{"image": "x", "singlePodQPS": 1, "totalQPS": 10}, "spec.port"},
			{map[string]any{"image": "x", "port": "http", "singlePodQPS": 1, "totalQPS": 10}, "spec.port"},
			{map[string]any{"image": "x", "port": 8080, "singlePodQPS": 1, "totalQPS": 10, "replicas": 3}, "replicas"},
		} {
			var e apiError
			if code := web.do(ctx, "PUT", ewPath+"bad", tc.body, &e); code != 422 || e.Reason != "Invalid" || !strings.Contains(e.Message, tc.field) {
				t.Errorf("PUT %v: %d %+v, want 422 naming %s", tc.body, code, e, tc.field)
			}
		}
		var e apiError
		if code := web.do(ctx, "GET", ewPath+"bad", nil, &e); code != 404 {
			t.Errorf("a refused spec was stored: GET %d %+v", code, e)
		}
	})
	t.Run("elasticweb: the old API's objects are never taken over; delete them to migrate", func(t *testing.T) {
		// What the one-shot API made: labelled, applied by "capscale", no
		// owner.
		old := corev1ac.Service("legacy", ns).
			WithLabels(map[string]string{names.ElasticWebLabel: "legacy", "app.kubernetes.io/managed-by": names.FieldManager}).
			WithSpec(corev1ac.ServiceSpec().WithType(corev1.ServiceTypeNodePort).WithSelector(map[string]string{names.ElasticWebLabel: "legacy"}).
				WithPorts(corev1ac.ServicePort().WithName("http").WithPort(80).WithTargetPort(intstr.FromInt32(80))))
		if _, err := s.Client.CoreV1().Services(ns).Apply(ctx, old, metav1.ApplyOptions{FieldManager: names.FieldManager, Force: true}); err != nil {
			t.Fatal(err)
		}
		var got elasticWebAnswer
		if code := web.do(ctx, "PUT", ewPath+"legacy", map[string]any{"image": "registry.example/web:2", "port": 8080, "singlePodQPS": 500, "totalQPS": 500}, &got); code != 200 {
			t.Fatalf("PUT: %d", code)
		}
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if web.do(ctx, "GET", ewPath+"legacy", nil, &got) != 200 {
				return false, nil
			}
			c := meta.FindStatusCondition(got.Status.Conditions, "Reconciled")
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "ObjectConflict" &&
				strings.Contains(c.Message, "Service "+ns+"/legacy exists and was not created by this ElasticWeb"), nil
		})
		if err != nil {
			t.Fatalf("no ObjectConflict condition naming the old Service: %+v", got.Status.Conditions)
		}
		eventually(ctx, t, 30*time.Second, "no ObjectConflict Warning event", func(ctx context.Context) bool {
			return hasEvent(ctx, s, "legacy", "ObjectConflict", "Service "+ns+"/legacy")
		})
		svc, err := s.Client.CoreV1().Services(ns).Get(ctx, "legacy", metav1.GetOptions{})
		if err != nil || len(svc.OwnerReferences) != 0 || svc.Spec.Ports[0].Port != 80 {
			t.Errorf("the old Service was changed: %+v, %v", svc, err)
		}
		// docs/elasticweb.md's migration: delete the old object; the ElasticWeb's own
		// comes in its place.
		if err := s.Client.CoreV1().Services(ns).Delete(ctx, "legacy", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return web.do(ctx, "GET", ewPath+"legacy", nil, &got) == 200 && meta.IsStatusConditionTrue(got.Status.Conditions, "Reconciled"), nil
		})
		if err != nil {
			t.Fatalf("not Reconciled after the old Service went: %+v", got.Status.Conditions)
		}
		svc, err = s.Client.CoreV1().Services(ns).Get(ctx, "legacy", metav1.GetOptions{})
		if err != nil || metav1.GetControllerOf(svc) == nil || svc.Spec.Ports[0].Port != 8080 {
			t.Errorf("the ElasticWeb's own Service: %+v, %v", svc, err)
		}
	})
	t.Run("an admission policy refuses the caller through the API", func(t *testing.T) {
		frozenToken := token("frozen")
		bind(ctx, t, s, ns, "frozen-edit", "ClusterRole", "edit", "frozen")
		const msg = "deployments are frozen for this caller"
		freezeUser(ctx, t, s, "system:serviceaccount:"+ns+":frozen", msg)
		waitAdmissionDenies(ctx, t, s, frozenToken, ns, "managed")
		before, err := s.Client.AppsV1().Deployments(ns).Get(ctx, "managed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var e apiError
		frozen := &apiClient{t: t, s: s, http: hc, token: frozenToken}
		if code := frozen.do(ctx, "POST", "/v1/namespaces/"+ns+"/deployments/managed/stop", nil, &e); code != 403 || !strings.Contains(e.Message, msg) {
			t.Errorf("stop as frozen: %d %+v, want 403 with the policy's message", code, e)
		}
		if code := frozen.do(ctx, "POST", "/v1/namespaces/"+ns+"/deployments/managed/restart", nil, &e); code != 403 || !strings.Contains(e.Message, msg) {
			t.Errorf("restart as frozen: %d %+v, want 403 with the policy's message", code, e)
		}
		after, err := s.Client.AppsV1().Deployments(ns).Get(ctx, "managed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d := deploymentWrites(before, after); d != "" {
			t.Errorf("refused calls changed the deployment: %s", d)
		}
	})
	t.Run("the API's ServiceAccount cannot write", func(t *testing.T) {
		sa := "system:serviceaccount:" + stack.Namespace + ":capscale-workload-api"
		for _, check := range [][]string{
			{"update", "deployments"}, {"patch", "deployments"}, {"update", "deployments/scale"},
			{"update", "statefulsets"}, {"create", "services"}, {"patch", "horizontalpodautoscalers"},
			{"create", "tokenreviews"}, {"create", "subjectaccessreviews"}, {"impersonate", "users"},
			{"patch", "elasticwebs.capscale.io"}, {"create", "elasticwebs.capscale.io"},
		} {
			out, err := s.Kubectl(ctx, "auth", "can-i", check[0], check[1], "--all-namespaces", "--as", sa)
			if got := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]); got != "no" {
				t.Errorf("kubectl auth can-i %s %s as the API: %q (%v), want no", check[0], check[1], got, err)
			}
		}
	})
	t.Run("the apiserver's audit log names the caller for every mutation", func(t *testing.T) {
		events := auditWrites(t, s.AuditLog)
		api := "system:serviceaccount:" + stack.Namespace + ":capscale-workload-api"
		seen := map[string]bool{}
		for _, ev := range events {
			if ev.User.Username == api {
				t.Errorf("the API wrote as itself: %s %s", ev.Verb, ev.RequestURI)
			}
			if ev.ObjectRef.Namespace == ns && ev.ResponseStatus.Code < 300 {
				seen[ev.User.Username+" "+ev.Verb+" "+ev.ObjectRef.Resource+"/"+ev.ObjectRef.Subresource] = true
			}
		}
		sa := func(name string) string { return "system:serviceaccount:" + ns + ":" + name }
		for _, want := range []string{
			sa("scaler") + " update deployments/scale",
			sa("stopper") + " update deployments/",
			sa("console") + " update deployments/",
			sa("console") + " patch deployments/",
			sa("console") + " update horizontalpodautoscalers/",
			sa("web") + " patch elasticwebs/",
		} {
			if !seen[want] {
				t.Errorf("no audit event %q; the caller's writes were %v", want, seen)
			}
		}
	})
	// After the audit log's subtest: its writes are not among the ones
	// checked there.
	t.Run("down and back: nothing else waits on it, its first request is served", func(t *testing.T) {
		workloadAPIDown(ctx, t, s, hc, console)
	})
}

// workloadAPIDown is the workload API's row of the failure matrix
// (docs/operations.md "When a part of capscale is down"): while it is down a
// console's call fails and nothing else notices (a Deployment scaled with
// the apiserver gets its pods); the first request after it is back is
// served. It holds no state, so nothing is caught up.
func workloadAPIDown(ctx context.Context, t *testing.T, s *stack.Stack, hc *http.Client, console *apiClient) {
	ns := adapterNS
	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, "down", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	WaitForRunningPods(ctx, t, s.Plane, ns, "app=down", 1)
	s.WorkloadAPI.Kill()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.WorkloadAPIURL+"/v1/namespaces/"+ns+"/deployments/down/scale", strings.NewReader(`{"replicas":2}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+console.token)
	if resp, err := hc.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the killed workload API answered %d", resp.StatusCode)
	}
	// Nothing else waits on it: the same scale through the apiserver.
	patch := []byte(`{"spec":{"replicas":3}}`)
	if _, err := s.Client.AppsV1().Deployments(ns).Patch(ctx, "down", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	WaitForRunningPods(ctx, t, s.Plane, ns, "app=down", 3)

	start := time.Now()
	if err := s.RestartWorkloadAPI(ctx); err != nil {
		t.Fatal(err)
	}
	ready := time.Since(start)
	if code := console.do(ctx, "PUT", "/v1/namespaces/"+ns+"/deployments/down/scale", map[string]int32{"replicas": 2}, nil); code != 200 {
		t.Fatalf("the first request after the restart: %d, want 200", code)
	}
	served := time.Since(start)
	WaitForRunningPods(ctx, t, s.Plane, ns, "app=down", 2)
	t.Logf("workload API: ready %v after its restart, its first request served %v after that", ready.Round(time.Millisecond), (served - ready).Round(time.Millisecond))
}

// deploymentWrites says what differs between two reads of a deployment
// in what the workload API writes (its spec, labels and annotations), or
// "". Not the resourceVersion: kube-controller-manager's status writes
// move it too (seen on a loaded machine, between the reads around two
// refused calls).
func deploymentWrites(before, after *appsv1.Deployment) string {
	switch {
	case after.Generation != before.Generation:
		return fmt.Sprintf("generation %d -> %d", before.Generation, after.Generation)
	case !equality.Semantic.DeepEqual(after.Spec, before.Spec):
		return fmt.Sprintf("spec %+v -> %+v", before.Spec, after.Spec)
	case !maps.Equal(after.Annotations, before.Annotations):
		return fmt.Sprintf("annotations %v -> %v", before.Annotations, after.Annotations)
	case !maps.Equal(after.Labels, before.Labels):
		return fmt.Sprintf("labels %v -> %v", before.Labels, after.Labels)
	}
	return ""
}

// elasticWebAnswer is the workload API's answer for an ElasticWeb.
type elasticWebAnswer struct {
	Generation int64                     `json:"generation"`
	Spec       v1alpha1.ElasticWebSpec   `json:"spec"`
	Status     v1alpha1.ElasticWebStatus `json:"status"`
}

// applyManagers are the managers that server-side applied an object.
func applyManagers(mf []metav1.ManagedFieldsEntry) map[string]bool {
	out := map[string]bool{}
	for _, m := range mf {
		if m.Operation == metav1.ManagedFieldsOperationApply && m.Subresource == "" {
			out[m.Manager] = true
		}
	}
	return out
}

func dynamicClient(t *testing.T, s *stack.Stack) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

func bind(ctx context.Context, t *testing.T, s *stack.Stack, ns, name, kind, role, sa string) {
	t.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: kind, Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}
	if _, err := s.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(fmt.Errorf("binding %s: %w", name, err))
	}
}

func replicaSetCount(ctx context.Context, t *testing.T, s *stack.Stack, ns, selector string) int {
	t.Helper()
	l, err := s.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// freezeUser installs a ValidatingAdmissionPolicy that denies user's
// Deployment updates with msg.
func freezeUser(ctx context.Context, t *testing.T, s *stack.Stack, user, msg string) {
	t.Helper()
	pol := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "freeze-user"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments", "deployments/scale"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "the-user", Expression: fmt.Sprintf("request.userInfo.username == %q", user)}},
			// Reason Forbidden makes the denial a 403 (the default, Invalid,
			// is a 422); the API must hand back whichever the apiserver sends.
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: msg, Reason: ptr.To(metav1.StatusReasonForbidden)}},
		},
	}
	if _, err := s.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "freeze-user"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: "freeze-user", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if _, err := s.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitAdmissionDenies waits until a dry-run update of the deployment as
// token is refused: the apiserver loads a new policy asynchronously.
func waitAdmissionDenies(ctx context.Context, t *testing.T, s *stack.Stack, token, ns, name string) {
	t.Helper()
	cfg := rest.AnonymousClientConfig(s.Config)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		// A real change, so that the update is not a no-op; dry run keeps it.
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations["e2e.capscale.io/probe"] = time.Now().String()
		_, last = cs.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), "freeze-user"), nil
	})
	if err != nil {
		t.Fatalf("the admission policy never took effect: %v; last dry-run update: %v", err, last)
	}
}

// auditEvent is what the tests read of an audit.k8s.io/v1 Event.
type auditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource, Subresource, Namespace, Name string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// auditWrites reads every event of the plane's audit log (writes only, by
// its policy).
func auditWrites(t *testing.T, path string) []auditEvent {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	var out []auditEvent
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev auditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, ev)
	}
	return out
}
