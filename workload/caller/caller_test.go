package caller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestForSendsOnlyTheCallersToken: each client carries its own caller's
// token and never the API's own credentials.
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
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "Bearer alice-token,Bearer bob-token" {
		t.Errorf("Authorization headers %q, want each caller's own token", seen)
	}
}

func TestNewRefusesNoRateLimit(t *testing.T) {
	if _, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, 0, 1); err == nil {
		t.Error("qps 0 was accepted")
	}
}
