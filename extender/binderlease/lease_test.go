package binderlease

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestTwoBinders: a second binder ID never binds while the first renews,
// learns who holds the lease and says so once; replicas of one ID share
// it; the second takes over only after the first has been silent for a
// lease duration.
func TestTwoBinders(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC))
	mk := func(id string) (*Lease, *record.FakeRecorder) {
		l, err := New(cs, "capscale-system", id, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec := record.NewFakeRecorder(10)
		l.clock, l.events = clk, rec
		return l, rec
	}
	a, _ := mk("capscale-scheduler")
	a2, _ := mk("capscale-scheduler")
	b, bEvents := mk("default-scheduler")

	if err := a.Check(); err == nil {
		t.Fatal("a binds before it ever held the lease")
	}
	a.tick(ctx)
	if err := a.Check(); err != nil {
		t.Fatalf("a after creating the lease: %v", err)
	}
	b.tick(ctx)
	err := b.Check()
	if err == nil || !strings.Contains(err.Error(), `"capscale-scheduler", holds`) {
		t.Fatalf("b.Check() = %v, want a refusal naming the holder", err)
	}
	if got := testutil.ToFloat64(b.held); got != 0 {
		t.Errorf("b's held gauge = %v, want 0", got)
	}
	if got := testutil.ToFloat64(a.held); got != 1 {
		t.Errorf("a's held gauge = %v, want 1", got)
	}
	if ev := <-bEvents.Events; !strings.Contains(ev, "UnderlayIPBinderConflict") {
		t.Errorf("event %q", ev)
	}
	a2.tick(ctx)
	if err := a2.Check(); err != nil {
		t.Fatalf("a replica of the holding ID: %v", err)
	}

	// a renews every couple of seconds; b keeps waiting and does not
	// repeat its Event.
	for i := 0; i < 10; i++ {
		clk.Step(RetryPeriod)
		a.tick(ctx)
		b.tick(ctx)
		if b.Check() == nil {
			t.Fatalf("b took the lease while a renewed it (after %d renewals)", i+1)
		}
	}
	if n := len(bEvents.Events); n != 0 {
		t.Errorf("b repeated its Event %d times", n)
	}

	// a stops renewing: it stops binding after RenewDeadline, and b takes
	// over only after a full Duration of silence.
	clk.Step(RenewDeadline)
	if a.Check() == nil {
		t.Fatal("a still binds RenewDeadline after its last renewal")
	}
	b.tick(ctx)
	if b.Check() == nil {
		t.Fatal("b took over before the lease had been silent for its duration")
	}
	clk.Step(Duration - RenewDeadline)
	b.tick(ctx)
	if err := b.Check(); err != nil {
		t.Fatalf("b after the lease expired: %v", err)
	}
	a.tick(ctx)
	if err := a.Check(); err == nil || !strings.Contains(err.Error(), `"default-scheduler", holds`) {
		t.Fatalf("a coming back: Check() = %v, want a refusal naming b", err)
	}
}
