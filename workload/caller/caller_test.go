package caller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
)

// TestForSendsOnlyTheCallersToken: each client, typed or dynamic, carries
// its own caller's token and never the API's own credentials.
func TestForSendsOnlyTheCallersToken(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"no"}`))
	}))
	t.Cleanup(srv.Close)
	c, err := New(&rest.Config{Host: srv.URL, BearerToken: "the-api-s-own"}, 100, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"alice-token", "bob-token"} {
		cs, err := c.For(tok)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = cs.AppsV1().Deployments("ns").Get(context.Background(), "web", metav1.GetOptions{})
		dc, err := c.DynamicFor(tok)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = dc.Resource(v1alpha1.ElasticWebResource).Namespace("ns").Get(context.Background(), "web", metav1.GetOptions{})
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "Bearer alice-token,Bearer alice-token,Bearer bob-token,Bearer bob-token" {
		t.Errorf("Authorization headers %q, want each caller's own token", seen)
	}
}

func TestNewRefusesNoRateLimit(t *testing.T) {
	if _, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, 0, 1); err == nil {
		t.Error("qps 0 was accepted")
	}
}

// TestRateLimitIsShared: the token bucket is one for all callers' clients,
// so many requests (bogus tokens included) cannot multiply the calls the
// apiserver sees.
func TestRateLimitIsShared(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`))
	}))
	t.Cleanup(srv.Close)
	// One call per ~3 hours, burst 1: the first caller takes the only token.
	c, err := New(&rest.Config{Host: srv.URL}, 0.0001, 1)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := c.For("bogus-1")
	if _, err := first.AppsV1().Deployments("ns").Get(context.Background(), "web", metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("first call: %v, want the apiserver's 401", err)
	}
	second, _ := c.For("bogus-2")
	// With a deadline the limiter answers at once when no token can come in
	// time; a client with a limiter of its own would reach the server.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := second.AppsV1().Deployments("ns").Get(ctx, "web", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "rate limiter") {
		t.Errorf("second caller's call: %v, want the shared rate limiter to hold it back", err)
	}
	third, _ := c.DynamicFor("bogus-3")
	if _, err := third.Resource(v1alpha1.ElasticWebResource).Namespace("ns").Get(ctx, "web", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "rate limiter") {
		t.Errorf("a dynamic client's call: %v, want the same shared rate limiter to hold it back", err)
	}
}
