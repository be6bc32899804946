package workload

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/internal/names"
)

func TestRestart(t *testing.T) {
	e := newEnv(t,
		deployment("ns", "web", 2),
		deployment("ns", "paused", 2, func(d *appsv1.Deployment) { d.Spec.Paused = true }),
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent"}},
	)

	t.Run("two restarts within one second both change the template", func(t *testing.T) {
		// The fake clock does not move between the calls: the worst case.
		var r1, r2 RestartResponse
		if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/restart", "alice", "", &r1); code != http.StatusAccepted {
			t.Fatalf("first restart: %d", code)
		}
		a1 := e.deployment("ns", "web").Spec.Template.Annotations[RestartedAtAnnotation]
		if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/restart", "alice", "", &r2); code != http.StatusAccepted {
			t.Fatalf("second restart: %d", code)
		}
		a2 := e.deployment("ns", "web").Spec.Template.Annotations[RestartedAtAnnotation]
		if a1 == "" || a1 == a2 || a1 != r1.RestartedAt || a2 != r2.RestartedAt {
			t.Fatalf("annotations %q then %q (responses %q, %q): want two different stamps", a1, a2, r1.RestartedAt, r2.RestartedAt)
		}
		t1, err1 := time.Parse(time.RFC3339Nano, a1)
		t2, err2 := time.Parse(time.RFC3339Nano, a2)
		if err1 != nil || err2 != nil || !t2.After(t1) || t2.Sub(t1) >= time.Second {
			t.Errorf("stamps %q, %q: want RFC3339Nano, increasing, within one second", a1, a2)
		}
	})
	t.Run("sub-second precision from the clock", func(t *testing.T) {
		e.clk.Step(250 * time.Millisecond)
		var r RestartResponse
		e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/restart", "alice", "", &r)
		if !strings.Contains(r.RestartedAt, ".25") {
			t.Errorf("restartedAt %q lacks the sub-second part", r.RestartedAt)
		}
	})
	tests := []struct {
		name, path string
		want       int
		wantMsg    string
	}{
		{name: "paused deployment", path: "/v1/namespaces/ns/deployments/paused/restart", want: http.StatusConflict, wantMsg: "paused"},
		{name: "statefulset", path: "/v1/namespaces/ns/statefulsets/db/restart", want: http.StatusAccepted},
		{name: "daemonset", path: "/v1/namespaces/ns/daemonsets/agent/restart", want: http.StatusAccepted},
		{name: "missing", path: "/v1/namespaces/ns/deployments/nope/restart", want: http.StatusNotFound},
		{name: "unserved resource", path: "/v1/namespaces/ns/pods/web/restart", want: http.StatusNotFound, wantMsg: "not served"},
		{name: "wrong method", path: "/v1/namespaces/ns/deployments/web/restart?m=GET", want: http.StatusMethodNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := http.MethodPost
			if strings.HasSuffix(tc.path, "?m=GET") {
				method = http.MethodGet
			}
			var msg string
			code := e.do(method, tc.path, "alice", "", &msg)
			if code != tc.want || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("got %d %q, want %d containing %q", code, msg, tc.want, tc.wantMsg)
			}
		})
	}
	if a := e.deployment("ns", "paused").Spec.Template.Annotations[RestartedAtAnnotation]; a != "" {
		t.Errorf("paused deployment was patched: %q", a)
	}
}

func TestStopIsIdempotent(t *testing.T) {
	e := newEnv(t, deployment("ns", "web", 3))
	var r StopResponse
	if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/stop", "alice", "", &r); code != http.StatusOK {
		t.Fatalf("stop: %d", code)
	}
	d := e.deployment("ns", "web")
	if *d.Spec.Replicas != 0 || d.Annotations[names.ReplicasBeforeStopAnnotation] != "3" || r.AlreadyStopped || *r.RememberedReplicas != 3 {
		t.Fatalf("after stop: replicas %d, annotation %q, response %+v", *d.Spec.Replicas, d.Annotations[names.ReplicasBeforeStopAnnotation], r)
	}
	r = StopResponse{}
	if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/stop", "alice", "", &r); code != http.StatusOK {
		t.Fatalf("second stop: %d", code)
	}
	d = e.deployment("ns", "web")
	if d.Annotations[names.ReplicasBeforeStopAnnotation] != "3" || !r.AlreadyStopped || r.RememberedReplicas == nil || *r.RememberedReplicas != 3 {
		t.Fatalf("second stop overwrote the remembered count: annotation %q, response %+v", d.Annotations[names.ReplicasBeforeStopAnnotation], r)
	}
	if got := testutil.ToFloat64(e.srv.mutations.WithLabelValues("stop", "200")); got != 2 {
		t.Errorf("capscale_workload_mutations_total{action=stop,result=200} = %v, want 2", got)
	}

	var s StartResponse
	if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/start", "alice", "", &s); code != http.StatusOK {
		t.Fatalf("start: %d", code)
	}
	d = e.deployment("ns", "web")
	if *d.Spec.Replicas != 3 || s.Replicas != 3 || s.Source != "annotation" {
		t.Fatalf("start restored %d (response %+v), want 3 from the annotation", *d.Spec.Replicas, s)
	}
	if _, ok := d.Annotations[names.ReplicasBeforeStopAnnotation]; ok {
		t.Error("start left the annotation behind")
	}
	s = StartResponse{}
	if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/start", "alice", "", &s); code != http.StatusOK || !s.AlreadyRunning {
		t.Errorf("second start: %d %+v, want 200 alreadyRunning", code, s)
	}
}

func TestStopRetriesOnConflict(t *testing.T) {
	e := newEnv(t, deployment("ns", "web", 3))
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	conflicted := false
	e.react = func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicted || a.GetVerb() != "update" || a.GetResource().Resource != "deployments" || a.GetSubresource() != "" {
			return false, nil, nil
		}
		conflicted = true
		// Someone scales to 5 between our read and our write.
		obj, _ := e.cs.Tracker().Get(gvr, "ns", "web")
		d := obj.(*appsv1.Deployment).DeepCopy()
		d.Spec.Replicas = ptr.To[int32](5)
		if err := e.cs.Tracker().Update(gvr, d, "ns"); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), "web", nil)
	}
	var r StopResponse
	if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/stop", "alice", "", &r); code != http.StatusOK {
		t.Fatalf("stop: %d", code)
	}
	if got := e.deployment("ns", "web").Annotations[names.ReplicasBeforeStopAnnotation]; got != "5" {
		t.Errorf("remembered %q, want the concurrent writer's 5: the retry must re-read", got)
	}
}

func TestStartAndStopWithHPA(t *testing.T) {
	stopped := func(d *appsv1.Deployment) {
		d.Spec.Replicas = ptr.To[int32](0)
		d.Annotations = map[string]string{names.ReplicasBeforeStopAnnotation: "8"}
	}
	e := newEnv(t,
		deployment("ns", "web", 0, stopped),
		hpa("ns", "web-hpa", "web", ptr.To[int32](2), 5),
		deployment("ns", "zero", 3),
		hpa("ns", "zero-hpa", "zero", ptr.To[int32](0), 5),
		deployment("ns", "managed", 3),
		hpa("ns", "managed-hpa", "managed", nil, 6),
		deployment("ns", "forgotten", 0),
		hpa("ns", "forgotten-hpa", "forgotten", ptr.To[int32](2), 6),
	)
	t.Run("start with nothing remembered uses the HPA's minReplicas", func(t *testing.T) {
		var s StartResponse
		if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/forgotten/start", "alice", "", &s); code != http.StatusOK {
			t.Fatalf("start: %d", code)
		}
		if got := *e.deployment("ns", "forgotten").Spec.Replicas; got != 2 || s.Source != "hpa" {
			t.Errorf("replicas = %d, source %q; want 2 from the HPA", got, s.Source)
		}
	})
	t.Run("start never goes above the HPA's maxReplicas", func(t *testing.T) {
		var s StartResponse
		if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/start", "alice", "", &s); code != http.StatusOK {
			t.Fatalf("start: %d", code)
		}
		if got := *e.deployment("ns", "web").Spec.Replicas; got != 5 {
			t.Errorf("replicas = %d, want the HPA max 5", got)
		}
		if !s.CappedByHPA || s.RequestedReplicas != 8 || s.HPA == nil || s.HPA.Name != "web-hpa" || !strings.Contains(s.Message, "at most 5") {
			t.Errorf("response does not explain the cap: %+v", s)
		}
	})
	t.Run("stop of an HPA with minReplicas 0 is refused", func(t *testing.T) {
		var msg string
		if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/zero/stop", "alice", "", &msg); code != http.StatusConflict || !strings.Contains(msg, "minReplicas 0") {
			t.Errorf("got %d %q, want 409 explaining minReplicas 0", code, msg)
		}
		if got := *e.deployment("ns", "zero").Spec.Replicas; got != 3 {
			t.Errorf("replicas changed to %d", got)
		}
	})
	t.Run("stop of an HPA-managed workload explains ScalingDisabled", func(t *testing.T) {
		var r StopResponse
		if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/managed/stop", "alice", "", &r); code != http.StatusOK {
			t.Fatalf("stop: %d", code)
		}
		if !strings.Contains(r.Message, "ScalingDisabled") || r.HPA == nil {
			t.Errorf("response does not explain the HPA: %+v", r)
		}
	})
}

func TestStartErrors(t *testing.T) {
	e := newEnv(t, deployment("ns", "cold", 0), deployment("ns", "web", 0))
	tests := []struct {
		name, path, body string
		want             int
		wantReplicas     int32
	}{
		{name: "nothing remembered", path: "/v1/namespaces/ns/deployments/cold/start", want: http.StatusConflict},
		{name: "zero replicas in body", path: "/v1/namespaces/ns/deployments/cold/start", body: `{"replicas":0}`, want: http.StatusUnprocessableEntity},
		{name: "unknown field", path: "/v1/namespaces/ns/deployments/cold/start", body: `{"replica":2}`, want: http.StatusBadRequest},
		{name: "daemonsets cannot start", path: "/v1/namespaces/ns/daemonsets/cold/start", want: http.StatusNotFound},
		{name: "body replicas", path: "/v1/namespaces/ns/deployments/web/start", body: `{"replicas":2}`, want: http.StatusOK, wantReplicas: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code := e.do(http.MethodPost, tc.path, "alice", tc.body, nil); code != tc.want {
				t.Errorf("status = %d, want %d", code, tc.want)
			}
			if tc.wantReplicas > 0 {
				if got := *e.deployment("ns", "web").Spec.Replicas; got != tc.wantReplicas {
					t.Errorf("replicas = %d, want %d", got, tc.wantReplicas)
				}
			}
		})
	}
}

func TestScale(t *testing.T) {
	e := newEnv(t,
		readyNode("n1", "2"), readyNode("n2", "2"),
		deployment("ns", "web", 1),
		deployment("ns", "managed", 2),
		hpa("ns", "managed-hpa", "managed", ptr.To[int32](2), 4),
	)
	t.Run("fits", func(t *testing.T) {
		var r ScaleResponse
		if code := e.do(http.MethodPut, "/v1/namespaces/ns/deployments/web/scale", "alice", `{"replicas":3}`, &r); code != http.StatusOK {
			t.Fatalf("scale: %d", code)
		}
		if got := *e.deployment("ns", "web").Spec.Replicas; got != 3 {
			t.Errorf("replicas = %d, want 3", got)
		}
		if r.Capacity == nil || r.Capacity.Replicas != 4 || r.PreviousReplicas != 1 || len(r.Warnings) != 0 {
			t.Errorf("response %+v: want capacity 4, previous 1, no warnings", r)
		}
	})
	t.Run("more than fits still scales but warns", func(t *testing.T) {
		var r ScaleResponse
		if code := e.do(http.MethodPut, "/v1/namespaces/ns/deployments/web/scale", "alice", `{"replicas":20}`, &r); code != http.StatusOK {
			t.Fatalf("scale: %d", code)
		}
		if got := *e.deployment("ns", "web").Spec.Replicas; got != 20 {
			t.Errorf("replicas = %d, want 20", got)
		}
		if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "only 4 fit") || !strings.Contains(r.Warnings[0], "cpu") {
			t.Errorf("warnings %q: want one naming the fit and the limiting resource", r.Warnings)
		}
	})
	t.Run("HPA-managed without adjustHPA is refused", func(t *testing.T) {
		var msg string
		if code := e.do(http.MethodPut, "/v1/namespaces/ns/deployments/managed/scale", "alice", `{"replicas":6}`, &msg); code != http.StatusConflict || !strings.Contains(msg, "managed-hpa") || !strings.Contains(msg, "adjustHPA") {
			t.Errorf("got %d %q", code, msg)
		}
		if got := *e.deployment("ns", "managed").Spec.Replicas; got != 2 {
			t.Errorf("replicas changed to %d", got)
		}
	})
	t.Run("adjustHPA moves the bounds and scales", func(t *testing.T) {
		var r ScaleResponse
		if code := e.do(http.MethodPut, "/v1/namespaces/ns/deployments/managed/scale?adjustHPA=true", "alice", `{"replicas":6}`, &r); code != http.StatusOK {
			t.Fatalf("scale: %d", code)
		}
		h, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers("ns").Get(context.Background(), "managed-hpa", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h.Spec.MaxReplicas != 6 || r.HPA == nil || r.HPA.MaxReplicas != 6 {
			t.Errorf("HPA max = %d (response %+v), want 6", h.Spec.MaxReplicas, r.HPA)
		}
		if got := *e.deployment("ns", "managed").Spec.Replicas; got != 6 {
			t.Errorf("replicas = %d, want 6", got)
		}
		var sawHPAUpdate bool
		for _, c := range e.callLog() {
			sawHPAUpdate = sawHPAUpdate || (c.user == "alice" && c.Verb == "update" && c.Resource == "horizontalpodautoscalers" && c.Name == "managed-hpa")
		}
		if !sawHPAUpdate {
			t.Error("adjustHPA did not update the HPA as the caller")
		}
	})
	bodyTests := []struct {
		name, body, query string
		want              int
	}{
		{name: "missing replicas", body: `{}`, want: http.StatusUnprocessableEntity},
		{name: "negative", body: `{"replicas":-1}`, want: http.StatusUnprocessableEntity},
		{name: "unknown field", body: `{"replicas":1,"force":true}`, want: http.StatusBadRequest},
		{name: "two values", body: `{"replicas":1}{"replicas":2}`, want: http.StatusBadRequest},
		{name: "not a number", body: `{"replicas":"3"}`, want: http.StatusBadRequest},
		{name: "empty", body: ``, want: http.StatusBadRequest},
		{name: "too large", body: `{"replicas":1` + strings.Repeat(" ", 5000) + `}`, want: http.StatusRequestEntityTooLarge},
		{name: "bad adjustHPA", body: `{"replicas":1}`, query: "?adjustHPA=maybe", want: http.StatusBadRequest},
	}
	for _, tc := range bodyTests {
		t.Run(tc.name, func(t *testing.T) {
			if code := e.do(http.MethodPut, "/v1/namespaces/ns/deployments/web/scale"+tc.query, "alice", tc.body, nil); code != tc.want {
				t.Errorf("status = %d, want %d", code, tc.want)
			}
		})
	}
}

func TestCapacityEndpoint(t *testing.T) {
	tainted := readyNode("n3", "8")
	tainted.Spec.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "p"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	e := newEnv(t, readyNode("n1", "2"), readyNode("n2", "1500m"), tainted, pod, deployment("ns", "web", 1))
	var r CapacityResponse
	if code := e.do(http.MethodGet, "/v1/namespaces/ns/deployments/web/capacity", "alice", "", &r); code != http.StatusOK {
		t.Fatalf("capacity: %d", code)
	}
	if r.Capacity.Replicas != 2 || r.Capacity.LimitingResource != "cpu" || r.CurrentReplicas != 1 {
		t.Errorf("capacity %+v, want 2 limited by cpu", r.Capacity)
	}
	if r.Capacity.UsageAvailable || !strings.Contains(r.UsageMessage, "unavailable") {
		t.Errorf("usage: available=%v message %q, want unavailable with a reason", r.Capacity.UsageAvailable, r.UsageMessage)
	}
	if calls := e.callLog(); len(calls) != 1 || calls[0].user != "alice" || calls[0].Verb != "get" || calls[0].Resource != "deployments" || calls[0].Subresource != "" {
		t.Errorf("capacity made calls %+v, want one get deployments as alice", calls)
	}
}

func TestRolloutStatus(t *testing.T) {
	stuck := deployment("ns", "web", 2, func(d *appsv1.Deployment) {
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 1, Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}}
	})
	e := newEnv(t, stuck)
	var st RolloutStatus
	if code := e.do(http.MethodGet, "/v1/namespaces/ns/deployments/web/rollout", "alice", "", &st); code != http.StatusOK {
		t.Fatalf("rollout: %d", code)
	}
	if st.Reason != "ProgressDeadlineExceeded" || st.Desired != 2 || st.Updated != 1 || st.Name != "web" {
		t.Errorf("rollout answer %+v", st)
	}
}

// TestActsAsTheCaller: every call goes out as the caller, whose RBAC
// decides, and the apiserver's refusals come back with their code.
func TestActsAsTheCaller(t *testing.T) {
	e := newEnv(t, deployment("ns", "web", 2))
	e.deny = func(user string, ra *authorizationv1.ResourceAttributes) bool {
		// bob holds the scale Role in ns: the scale subresource and a list
		// of HPAs.
		scaleRole := ra.Namespace == "ns" && ((ra.Subresource == "scale" && (ra.Verb == "get" || ra.Verb == "update")) ||
			(ra.Resource == "horizontalpodautoscalers" && ra.Verb == "list"))
		return user == "bob" && !scaleRole
	}
	if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/restart", "", "", nil); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/namespaces/ns/deployments/web/stop", nil)
	req.Header.Set("Authorization", "Bearer forged")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a token the apiserver refuses: %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}
	var msg string
	if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/restart", "bob", "", &msg); code != http.StatusForbidden || !strings.Contains(msg, `User "bob" cannot get`) {
		t.Errorf("restart as bob: %d %q, want the apiserver's 403", code, msg)
	}
	if code := e.do(http.MethodPost, "/v1/namespaces/ns/deployments/web/stop", "bob", "", &msg); code != http.StatusForbidden {
		t.Errorf("stop as bob: %d %q, want 403: stop writes the deployment's metadata", code, msg)
	}
	if code := e.do(http.MethodPut, "/v1/namespaces/ns/deployments/web/scale", "bob", `{"replicas":3}`, nil); code != http.StatusOK {
		t.Errorf("scale as bob: %d, want 200", code)
	}
	if code := e.do(http.MethodPut, "/v1/namespaces/other/deployments/web/scale", "bob", `{"replicas":3}`, nil); code != http.StatusForbidden {
		t.Errorf("scale in another namespace as bob: %d, want 403", code)
	}
	if got := *e.deployment("ns", "web").Spec.Replicas; got != 3 {
		t.Errorf("replicas %d, want 3 from bob's scale and nothing from his refused stop", got)
	}
	for _, c := range e.callLog() {
		if c.user != "bob" {
			t.Errorf("call %+v made as %q, want every call as the caller", c.ResourceAttributes, c.user)
		}
	}

	before := len(e.callLog())
	if code := e.do(http.MethodPut, "/v1/namespaces/ns/elasticwebs/shop", "alice", `{"image":"nginx","port":80,"singlePodQPS":10,"totalQPS":30}`, nil); code != http.StatusOK {
		t.Fatalf("elastic web apply: %d", code)
	}
	got := map[string]bool{}
	for _, c := range e.callLog()[before:] {
		if c.user != "alice" {
			t.Errorf("elastic web call %+v made as %q", c.ResourceAttributes, c.user)
		}
		got[c.Verb+" "+c.Group+"/"+c.Resource] = true
	}
	if want := map[string]bool{"patch capscale.io/elasticwebs": true}; !reflect.DeepEqual(got, want) {
		t.Errorf("elastic web apply made %v as alice, want only the apply of the ElasticWeb", got)
	}
}
