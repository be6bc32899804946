package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeAPI answers reviews: token "good-<user>" authenticates as <user>, and
// a user may do exactly the "verb resource/subresource" strings in allow.
type fakeAPI struct {
	allow      map[string]bool
	tokenCalls atomic.Int32
	sarCalls   atomic.Int32
	failTokens bool
	lastSAR    atomic.Pointer[authorizationv1.SubjectAccessReview]
}

func (f *fakeAPI) client() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.tokenCalls.Add(1)
		if f.failTokens {
			return true, nil, errors.New("apiserver down")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if user, ok := strings.CutPrefix(tr.Spec.Token, "good-"); ok {
			tr.Status.Authenticated = true
			tr.Status.User = authenticationv1.UserInfo{Username: user, Groups: []string{"system:authenticated"}}
		} else {
			tr.Status.Error = "invalid token"
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.sarCalls.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		f.lastSAR.Store(sar)
		ra := sar.Spec.ResourceAttributes
		key := ra.Verb + " " + ra.Resource
		if ra.Subresource != "" {
			key += "/" + ra.Subresource
		}
		sar.Status.Allowed = f.allow[sar.Spec.User+":"+key]
		if !sar.Status.Allowed {
			sar.Status.Reason = "no RBAC rule"
		}
		return true, sar, nil
	})
	return cs
}

func newTestServer(t *testing.T, f *fakeAPI, clk *clocktesting.FakeClock) (*httptest.Server, *Reviewer) {
	t.Helper()
	r := NewReviewer(f.client(), Options{TTL: 10 * time.Second, Clock: clk}, prometheus.NewRegistry())
	attrs := func(*http.Request) []Attributes {
		return []Attributes{{Verb: "update", Group: "apps", Resource: "deployments", Subresource: "scale", Namespace: "ns", Name: "web"}}
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if UserFrom(req.Context()) == nil {
			t.Error("no user in context")
		}
		w.WriteHeader(http.StatusOK)
	})
	srv := httptest.NewServer(r.Authenticated(nil)(r.Require(attrs)(ok)))
	t.Cleanup(srv.Close)
	return srv, r
}

func do(t *testing.T, url, authz string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("error response is not JSON: %q", resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode
}

func TestMiddleware(t *testing.T) {
	tests := []struct {
		name  string
		path  string
		authz string
		want  int
	}{
		{name: "no token", authz: "", want: http.StatusUnauthorized},
		{name: "wrong scheme", authz: "Basic Zm9vOmJhcg==", want: http.StatusUnauthorized},
		{name: "empty bearer", authz: "Bearer   ", want: http.StatusUnauthorized},
		{name: "invalid token", authz: "Bearer bad", want: http.StatusUnauthorized},
		{name: "denied", authz: "Bearer good-eve", want: http.StatusForbidden},
		{name: "allowed", authz: "Bearer good-alice", want: http.StatusOK},
		{name: "scheme is case-insensitive", authz: "bearer good-alice", want: http.StatusOK},
	}
	f := &fakeAPI{allow: map[string]bool{"alice:update deployments/scale": true}}
	srv, _ := newTestServer(t, f, clocktesting.NewFakeClock(time.Now()))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := do(t, srv.URL+tc.path, tc.authz); got != tc.want {
				t.Errorf("status = %d, want %d", got, tc.want)
			}
		})
	}
	sar := f.lastSAR.Load()
	ra := sar.Spec.ResourceAttributes
	if sar.Spec.User != "alice" || ra.Verb != "update" || ra.Group != "apps" || ra.Resource != "deployments" ||
		ra.Subresource != "scale" || ra.Namespace != "ns" || ra.Name != "web" {
		t.Errorf("SubjectAccessReview asked the wrong question: %+v %+v", sar.Spec, ra)
	}
}

func TestCache(t *testing.T) {
	f := &fakeAPI{allow: map[string]bool{"alice:update deployments/scale": true}}
	clk := clocktesting.NewFakeClock(time.Now())
	srv, r := newTestServer(t, f, clk)

	for range 3 {
		if got := do(t, srv.URL, "Bearer good-alice"); got != http.StatusOK {
			t.Fatalf("status = %d", got)
		}
		if got := do(t, srv.URL, "Bearer bad"); got != http.StatusUnauthorized {
			t.Fatalf("status = %d", got)
		}
	}
	if n := f.tokenCalls.Load(); n != 2 {
		t.Errorf("TokenReviews = %d, want 2 (one per distinct token)", n)
	}
	if n := f.sarCalls.Load(); n != 1 {
		t.Errorf("SubjectAccessReviews = %d, want 1", n)
	}
	if got := testutil.ToFloat64(r.cacheM.WithLabelValues("authn", "hit")); got != 4 {
		t.Errorf("authn hits = %v, want 4", got)
	}
	if got := testutil.ToFloat64(r.cacheM.WithLabelValues("authz", "miss")); got != 1 {
		t.Errorf("authz misses = %v, want 1", got)
	}

	clk.Step(11 * time.Second)
	if got := do(t, srv.URL, "Bearer good-alice"); got != http.StatusOK {
		t.Fatalf("status = %d", got)
	}
	if n := f.tokenCalls.Load(); n != 3 {
		t.Errorf("after TTL: TokenReviews = %d, want 3", n)
	}
	if n := f.sarCalls.Load(); n != 2 {
		t.Errorf("after TTL: SubjectAccessReviews = %d, want 2", n)
	}
}

func TestReviewFailureIsNotCached(t *testing.T) {
	f := &fakeAPI{failTokens: true}
	srv, _ := newTestServer(t, f, clocktesting.NewFakeClock(time.Now()))
	for range 2 {
		if got := do(t, srv.URL, "Bearer good-alice"); got != http.StatusServiceUnavailable {
			t.Fatalf("status = %d, want 503", got)
		}
	}
	if n := f.tokenCalls.Load(); n != 2 {
		t.Errorf("TokenReviews = %d, want 2: failures must not be cached", n)
	}
}

func TestAuthzKeyIgnoresOrder(t *testing.T) {
	a := Attributes{Verb: "get", Resource: "deployments", Namespace: "ns"}
	k1 := authzKey(&User{Name: "u", Groups: []string{"a", "b"}, Extra: map[string][]string{"x": {"1"}, "y": {"2"}}}, a)
	k2 := authzKey(&User{Name: "u", Groups: []string{"b", "a"}, Extra: map[string][]string{"y": {"2"}, "x": {"1"}}}, a)
	if k1 != k2 {
		t.Error("key depends on group or extra order")
	}
	if k1 == authzKey(&User{Name: "u", Groups: []string{"a", "b"}}, a) {
		t.Error("key ignores extra")
	}
	b := a
	b.Name = "other"
	if authzKey(&User{Name: "u"}, a) == authzKey(&User{Name: "u"}, b) {
		t.Error("key ignores the object name")
	}
}
