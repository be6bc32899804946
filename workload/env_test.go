package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/workload/lifecycle"
)

// env is a Server over a fake clientset, served on 127.0.0.1. The server's
// informers read e.cs; each request acts through a fake client of its own
// over the same objects, as the apiserver would see the caller: token
// "tok-<user>" is <user>, any other token is refused with 401, and a call
// deny says no to is refused with 403.
type env struct {
	t     *testing.T
	cs    *fake.Clientset
	srv   *Server
	url   string
	clk   *clocktesting.FakeClock
	reg   *prometheus.Registry
	mu    sync.Mutex
	deny  func(user string, ra *authorizationv1.ResourceAttributes) bool
	calls []call
	scale int // scale subresource updates
	// react, if set before the requests, runs before the fake apiserver
	// stores a call.
	react k8stesting.ReactionFunc
	// ews are the ElasticWebs the fake apiserver holds, by namespace/name;
	// applies are the ElasticWeb applies it received.
	ews     map[string]*unstructured.Unstructured
	applies []k8stesting.PatchActionImpl
}

// call is one API call a request made, and as whom.
type call struct {
	user string
	authorizationv1.ResourceAttributes
}

type envOpts struct {
	metrics metricsclient.Interface
}

func newEnv(t *testing.T, objs ...runtime.Object) *env {
	return newEnvWith(t, envOpts{}, objs...)
}

func newEnvWith(t *testing.T, o envOpts, objs ...runtime.Object) *env {
	t.Helper()
	e := &env{t: t, cs: fake.NewClientset(objs...), clk: clocktesting.NewFakeClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)), reg: prometheus.NewRegistry(),
		ews: map[string]*unstructured.Unstructured{}}
	factory := informers.NewSharedInformerFactory(e.cs, 0)
	e.srv = New(Config{
		ClientFor: e.clientFor, DynamicFor: e.dynamicFor, Metrics: o.metrics, Informers: factory, Registry: e.reg, Gatherer: e.reg,
		Clock: e.clk, MaxBodyBytes: 4096,
	})
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer %v did not sync", typ)
		}
	}
	hs := httptest.NewServer(e.srv.Handler())
	e.url = hs.URL
	t.Cleanup(func() {
		hs.Close()
		cancel()
		factory.Shutdown()
	})
	return e
}

// clientFor is the server's ClientFor: a fake apiserver client for token.
func (e *env) clientFor(token string) (kubernetes.Interface, error) {
	c := &fake.Clientset{}
	user, ok := strings.CutPrefix(token, "tok-")
	if !ok {
		c.AddReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewUnauthorized("Unauthorized")
		})
		return c, nil
	}
	tracker := e.cs.Tracker()
	c.AddReactor("*", "*", k8stesting.ObjectReaction(tracker))
	// The fake tracker knows no scale subresource: map it onto the object.
	for _, res := range []string{"deployments", "statefulsets"} {
		gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: res}
		c.PrependReactor("get", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "scale" {
				return false, nil, nil
			}
			obj, err := tracker.Get(gvr, a.GetNamespace(), a.(k8stesting.GetAction).GetName())
			if err != nil {
				return true, nil, err
			}
			m := obj.(metav1.Object)
			return true, &autoscalingv1.Scale{
				ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), ResourceVersion: m.GetResourceVersion()},
				Spec:       autoscalingv1.ScaleSpec{Replicas: lifecycle.ReplicasOf(*replicasPtr(obj))},
			}, nil
		})
		c.PrependReactor("update", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "scale" {
				return false, nil, nil
			}
			sc := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
			obj, err := tracker.Get(gvr, a.GetNamespace(), sc.Name)
			if err != nil {
				return true, nil, err
			}
			obj = obj.DeepCopyObject()
			*replicasPtr(obj) = ptr.To(sc.Spec.Replicas)
			if err := tracker.Update(gvr, obj, a.GetNamespace()); err != nil {
				return true, nil, err
			}
			e.mu.Lock()
			e.scale++
			e.mu.Unlock()
			return true, sc, nil
		})
	}
	if e.react != nil {
		c.PrependReactor("*", "*", e.react)
	}
	c.PrependReactor("*", "*", e.rbac(user))
	return c, nil
}

// dynamicFor is the server's DynamicFor: a fake apiserver client for
// ElasticWebs, with the same users and RBAC as clientFor.
func (e *env) dynamicFor(token string) (dynamic.Interface, error) {
	c := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.ElasticWebResource: "ElasticWebList"})
	user, ok := strings.CutPrefix(token, "tok-")
	if !ok {
		c.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewUnauthorized("Unauthorized")
		})
		return c, nil
	}
	c.PrependReactor("*", "*", e.elasticWebStore)
	if e.react != nil {
		c.PrependReactor("*", "*", e.react)
	}
	c.PrependReactor("*", "*", e.rbac(user))
	return c, nil
}

// elasticWebStore serves get and apply of ElasticWebs: an apply replaces the
// spec (the API is its one manager here) and bumps the generation when the
// spec changed; the status is whatever the test stored.
func (e *env) elasticWebStore(a k8stesting.Action) (bool, runtime.Object, error) {
	gr := v1alpha1.ElasticWebResource.GroupResource()
	key := a.GetNamespace() + "/" + actionName(a)
	e.mu.Lock()
	defer e.mu.Unlock()
	// Patch first: a patch action has GetName too.
	switch a := a.(type) {
	case k8stesting.PatchActionImpl:
		if a.PatchType != types.ApplyPatchType {
			return true, nil, apierrors.NewBadRequest("only apply patches are served")
		}
		e.applies = append(e.applies, a)
		sent := &unstructured.Unstructured{}
		if err := sent.UnmarshalJSON(a.Patch); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		u, ok := e.ews[key]
		if !ok {
			u = sent.DeepCopy()
			u.SetGeneration(0)
		}
		spec, _, _ := unstructured.NestedFieldCopy(sent.Object, "spec")
		old, _, _ := unstructured.NestedFieldCopy(u.Object, "spec")
		if !ok || !equality.Semantic.DeepEqual(spec, old) {
			u.SetGeneration(u.GetGeneration() + 1)
		}
		if err := unstructured.SetNestedField(u.Object, spec, "spec"); err != nil {
			return true, nil, err
		}
		e.ews[key] = u
		return true, u.DeepCopy(), nil
	case k8stesting.GetAction:
		u, ok := e.ews[key]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, a.GetName())
		}
		return true, u.DeepCopy(), nil
	}
	return true, nil, apierrors.NewMethodNotSupported(gr, a.GetVerb())
}

// rbac, the outermost reactor, logs the call and refuses what deny says.
func (e *env) rbac(user string) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		ra := authorizationv1.ResourceAttributes{
			Verb: a.GetVerb(), Group: a.GetResource().Group, Resource: a.GetResource().Resource,
			Subresource: a.GetSubresource(), Namespace: a.GetNamespace(), Name: actionName(a),
		}
		e.mu.Lock()
		e.calls = append(e.calls, call{user: user, ResourceAttributes: ra})
		deny := e.deny
		e.mu.Unlock()
		if deny != nil && deny(user, &ra) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: ra.Group, Resource: ra.Resource}, ra.Name,
				fmt.Errorf("User %q cannot %s resource %q in API group %q in the namespace %q", user, ra.Verb, ra.Resource, ra.Group, ra.Namespace))
		}
		return false, nil, nil
	}
}

func actionName(a k8stesting.Action) string {
	switch a := a.(type) {
	case interface{ GetName() string }: // get, patch, delete
		return a.GetName()
	case k8stesting.UpdateAction:
		if m, ok := a.GetObject().(metav1.Object); ok {
			return m.GetName()
		}
	}
	return ""
}

func replicasPtr(obj runtime.Object) **int32 {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Replicas
	case *appsv1.StatefulSet:
		return &o.Spec.Replicas
	}
	panic("no replicas")
}

// do sends a request as user (no Authorization header when user is "") and
// decodes the JSON answer into out when out is not nil.
func (e *env) do(method, path, user, body string, out any) int {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer tok-"+user)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode >= 400 {
		var er struct {
			Code    int    `json:"code"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(b, &er); err != nil || er.Code != resp.StatusCode || er.Reason == "" {
			e.t.Errorf("%s %s: error body is not {code,reason,message}: %s", method, path, b)
		}
		if m, ok := out.(*string); ok {
			*m = er.Message
		}
		return resp.StatusCode
	}
	if _, isMsg := out.(*string); out != nil && !isMsg {
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(out); err != nil {
			e.t.Fatalf("%s %s: decoding %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

func (e *env) deployment(ns, name string) *appsv1.Deployment {
	e.t.Helper()
	d, err := e.cs.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// callLog returns the API calls requests made so far.
func (e *env) callLog() []call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]call(nil), e.calls...)
}

func deployment(ns, name string, replicas int32, mutate ...func(*appsv1.Deployment)) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1, ResourceVersion: "1"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "c", Image: "img",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
				}}},
			},
		},
	}
	for _, m := range mutate {
		m(d)
	}
	return d
}

func hpa(ns, name, target string, minR *int32, maxR int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			MinReplicas:    minR,
			MaxReplicas:    maxR,
		},
	}
}

func readyNode(name, cpu string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110"),
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}
