package kedascaler

import (
	"context"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
)

// waitReads waits until the provider has been read more than n times.
func (f *fixture) waitReads(t *testing.T, n int64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.provider.reads.Load() > n, nil
	})
	if err != nil {
		t.Fatalf("the stream did not evaluate its trigger again (%d reads)", f.provider.reads.Load())
	}
}

// tick moves the fake clock one stream interval once the stream's ticker
// waits, and waits for the evaluation it triggers.
func (f *fixture) tick(t *testing.T) {
	t.Helper()
	n := f.provider.reads.Load()
	f.clock.Step(5 * time.Second)
	f.waitReads(t, n)
}

func recv(t *testing.T, s pb.ExternalScaler_StreamIsActiveClient) bool {
	t.Helper()
	r, err := s.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return r.Result
}

// TestStreamIsActivePushesChanges: the first answer at once, then only
// changes, one evaluation per interval; a stale source ends the stream with
// Unavailable instead of pushing false.
func TestStreamIsActivePushesChanges(t *testing.T) {
	f := startFixture(t, fixtureOptions{})
	c := f.client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s, err := c.StreamIsActive(ctx, ref(loadIndex))
	if err != nil {
		t.Fatal(err)
	}
	if !recv(t, s) {
		t.Fatal("first push: want active at 0.83 (threshold 0.5)")
	}
	f.tick(t) // unchanged: nothing is sent
	f.sources.set(0.1)
	f.tick(t)
	// A duplicate "true" from the unchanged tick would arrive first.
	if recv(t, s) {
		t.Fatal("after the load fell to 0.1: want inactive as the next message")
	}
	f.sources.set(0.9)
	f.tick(t)
	if !recv(t, s) {
		t.Fatal("after the load rose to 0.9: want active")
	}
	if got := testutil.ToFloat64(f.metrics.streams); got != 1 {
		t.Errorf("capscale_adapter_keda_streams = %v, want 1", got)
	}

	stale, err := c.StreamIsActive(ctx, ref(map[string]string{"metric": "capscale-load-index", "source": "stale-load", "targetValue": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stale.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("a stale source's stream: Recv = %v, %v; want Unavailable, never false", r, err)
	}

	// The client going away ends the stream.
	cancel()
	err = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(f.metrics.streams) == 0, nil
	})
	if err != nil {
		t.Errorf("the stream outlived its client: capscale_adapter_keda_streams = %v", testutil.ToFloat64(f.metrics.streams))
	}
	if got := testutil.ToFloat64(f.metrics.requests.WithLabelValues("StreamIsActive", "Unavailable")); got != 1 {
		t.Errorf(`requests_total{StreamIsActive,Unavailable} = %v, want 1`, got)
	}
}

// TestStreamIsActiveBounds: streams beyond MaxStreams are refused with
// ResourceExhausted, and shutting down ends open streams with Unavailable.
func TestStreamIsActiveBounds(t *testing.T) {
	f := startFixture(t, fixtureOptions{maxStreams: 2})
	c := f.client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var open []pb.ExternalScaler_StreamIsActiveClient
	for i := 0; i < 2; i++ {
		s, err := c.StreamIsActive(ctx, ref(qpsDesired))
		if err != nil {
			t.Fatal(err)
		}
		if !recv(t, s) {
			t.Fatal("want active: the QPS policy wants 3 replicas")
		}
		open = append(open, s)
	}
	third, err := c.StreamIsActive(ctx, ref(qpsDesired))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := third.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("third stream: Recv = %v, %v; want ResourceExhausted", r, err)
	}

	f.stop()
	for i, s := range open {
		if r, err := s.Recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("stream %d after shutdown: Recv = %v, %v; want Unavailable", i, r, err)
		}
	}
}
