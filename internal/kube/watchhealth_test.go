package kube

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// fakeWatchServer answers /api/v1/pods watches: "mode" picks the behaviour.
func fakeWatchServer(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("mode") {
		case "forbidden":
			http.Error(w, "no", http.StatusForbidden)
		case "expired":
			// 200, then the stream ends at once (a "too old" ERROR event).
			_, _ = w.Write([]byte(`{"type":"ERROR","object":{"code":410}}`))
		case "relist":
			w.(http.Flusher).Flush()
			// The marker split over two writes.
			_, _ = w.Write([]byte(`{"type":"ADDED"}{"type":"BOOKMARK","object":{"metadata":{"annotations":{"k8s.io/initial-`))
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
			_, _ = w.Write([]byte(`events-end":"true"}}}}`))
			w.(http.Flusher).Flush()
			<-release
		default:
			w.(http.Flusher).Flush()
			<-release
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv
}

// watch starts a watch request through h and reads it in the background,
// as an informer would.
func watch(t *testing.T, h *WatchHealth, url string) {
	t.Helper()
	c := &http.Client{Transport: h.Wrap(http.DefaultTransport)}
	resp, err := c.Get(url)
	if err != nil {
		return
	}
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
}

func waitCheck(t *testing.T, h *WatchHealth, wantErr string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		last = h.Check()
		if wantErr == "" {
			return last == nil, nil
		}
		return last != nil && strings.Contains(last.Error(), wantErr), nil
	})
	if err != nil {
		t.Fatalf("Check() = %v, want error containing %q", last, wantErr)
	}
}

func TestWatchHealth(t *testing.T) {
	srv := fakeWatchServer(t)
	pods := srv.URL + "/api/v1/pods?watch=true&fieldSelector=status.phase!%3DFailed"
	h := NewWatchHealth()
	h.Settle = 100 * time.Millisecond

	if err := h.Check(); err != nil {
		t.Fatalf("a new WatchHealth: %v", err)
	}
	// Not a watch: ignored, even when it fails.
	if _, err := (&http.Client{Transport: h.Wrap(http.DefaultTransport)}).Get(srv.URL + "/api/v1/pods?mode=forbidden"); err != nil {
		t.Fatal(err)
	}
	if err := h.Check(); err != nil {
		t.Fatalf("after a failed list: %v", err)
	}

	watch(t, h, pods+"&mode=forbidden")
	waitCheck(t, h, "/api/v1/pods fieldSelector=status.phase!=Failed: watch answered 403")

	// A resumed watch that the apiserver ends at once stays down...
	watch(t, h, pods+"&mode=expired")
	time.Sleep(3 * h.Settle)
	waitCheck(t, h, "403")

	// ...a relist is down until its last initial event...
	watch(t, h, pods+"&mode=relist&sendInitialEvents=true")
	waitCheck(t, h, "")

	// ...and a connection refused is down until a watch stays open.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	watch(t, h, dead.URL+"/api/v1/pods?watch=true&fieldSelector=status.phase!%3DFailed")
	waitCheck(t, h, "connection refused")
	watch(t, h, pods)
	waitCheck(t, h, "")
}

func TestWatchHealthKeysBySelector(t *testing.T) {
	srv := fakeWatchServer(t)
	h := NewWatchHealth()
	h.Settle = 50 * time.Millisecond
	watch(t, h, srv.URL+"/api/v1/pods?watch=1&labelSelector=a%3Db&mode=forbidden")
	waitCheck(t, h, "labelSelector=a=b")
	// Another informer of pods coming up does not heal the first.
	watch(t, h, srv.URL+"/api/v1/pods?watch=1")
	time.Sleep(3 * h.Settle)
	waitCheck(t, h, "labelSelector=a=b")
}
