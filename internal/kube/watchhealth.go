package kube

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// WatchHealth tells whether a client's informers are connected. An informer's
// HasSynced turns true after its first list and stays true for good, so it
// cannot say that the apiserver went away and the cache stopped following
// it. WatchHealth watches the watch requests themselves, at the transport
// (rest.Config.Wrap), and counts a watched resource as disconnected
//
//   - from the moment a watch request on it fails (no connection, or any
//     answer but 200) or a relist starts (a watch with sendInitialEvents),
//   - until a relist has delivered its last initial event (the
//     k8s.io/initial-events-end bookmark), or a plain watch has stayed open
//     for Settle: a watch resumed from a resource version the apiserver no
//     longer has is answered 200 and then ends at once with "too old", after
//     which the informer relists; Settle keeps that case disconnected.
//
// So "connected" means: the informer has a watch that the apiserver accepted
// from where its cache stands, or it has just re-read everything. Events of
// that watch may still be in the informer's queue (milliseconds). A resource
// whose watch never failed counts as connected: before the first list,
// HasSynced answers. Only watch requests are looked at; other requests of the
// same client pass through untouched.
type WatchHealth struct {
	// Settle is how long a resumed plain watch must stay open to count.
	Settle time.Duration

	mu   sync.Mutex
	down map[string]string // resource key → why
}

// NewWatchHealth returns a WatchHealth with a one-second Settle.
func NewWatchHealth() *WatchHealth {
	return &WatchHealth{Settle: time.Second, down: map[string]string{}}
}

// Wrap is a rest.Config WrapTransport: cfg.Wrap(h.Wrap).
func (h *WatchHealth) Wrap(rt http.RoundTripper) http.RoundTripper {
	return &watchTracker{health: h, next: rt}
}

// Check returns nil when every watched resource is connected, or an error
// naming the ones that are not and why.
func (h *WatchHealth) Check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.down) == 0 {
		return nil
	}
	keys := make([]string, 0, len(h.down))
	for k := range h.down {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	msgs := make([]string, len(keys))
	for i, k := range keys {
		msgs[i] = k + ": " + h.down[k]
	}
	return fmt.Errorf("informers not connected to the apiserver: %s", strings.Join(msgs, "; "))
}

func (h *WatchHealth) fail(key, why string) {
	h.mu.Lock()
	_, was := h.down[key]
	h.down[key] = why
	h.mu.Unlock()
	if !was {
		klog.InfoS("Informer watch not connected", "resource", key, "reason", why)
	}
}

func (h *WatchHealth) ok(key string) {
	h.mu.Lock()
	_, was := h.down[key]
	delete(h.down, key)
	h.mu.Unlock()
	if was {
		klog.InfoS("Informer watch connected again", "resource", key)
	}
}

type watchTracker struct {
	health *WatchHealth
	next   http.RoundTripper
}

// maxReason bounds an error text kept for /readyz.
const maxReason = 200

func (t *watchTracker) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if req.Method != http.MethodGet || !isTrue(q.Get("watch")) {
		return t.next.RoundTrip(req)
	}
	// Informers on one resource differ by their selectors.
	key := req.URL.Path
	for _, s := range []string{"fieldSelector", "labelSelector"} {
		if v := q.Get(s); v != "" {
			key += " " + s + "=" + v
		}
	}
	relist := isTrue(q.Get("sendInitialEvents"))
	if relist {
		t.health.fail(key, "relisting")
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		why := err.Error()
		if len(why) > maxReason {
			why = why[:maxReason]
		}
		t.health.fail(key, why)
		return resp, err
	}
	if resp.StatusCode != http.StatusOK {
		t.health.fail(key, "watch answered "+resp.Status)
		return resp, nil
	}
	if relist {
		resp.Body = &markerBody{ReadCloser: resp.Body, onMarker: func() { t.health.ok(key) }}
		return resp, nil
	}
	b := &endBody{ReadCloser: resp.Body}
	resp.Body = b
	time.AfterFunc(t.health.Settle, func() {
		if !b.ended.Load() {
			t.health.ok(key)
		}
	})
	return resp, nil
}

func isTrue(v string) bool { return v == "true" || v == "1" }

// endBody records that the stream ended (an error, EOF or Close).
type endBody struct {
	io.ReadCloser
	ended atomic.Bool
}

func (b *endBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.ended.Store(true)
	}
	return n, err
}

func (b *endBody) Close() error {
	b.ended.Store(true)
	return b.ReadCloser.Close()
}

// initialEventsEnd is the annotation of the bookmark that closes a relist's
// initial events. It is a plain string in JSON and protobuf alike.
var initialEventsEnd = []byte("k8s.io/initial-events-end")

// markerBody calls onMarker once the stream has carried initialEventsEnd.
type markerBody struct {
	io.ReadCloser
	onMarker func()
	// tail keeps the last bytes read, for a marker split across reads.
	tail []byte
	seen bool
}

func (b *markerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.seen {
		buf := append(b.tail, p[:n]...)
		if bytes.Contains(buf, initialEventsEnd) {
			b.seen = true
			b.tail = nil
			b.onMarker()
		} else {
			keep := min(len(buf), len(initialEventsEnd)-1)
			b.tail = append(b.tail[:0], buf[len(buf)-keep:]...)
		}
	}
	return n, err
}
