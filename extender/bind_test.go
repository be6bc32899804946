package extender

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/capscale/capscale/internal/underlay"
)

// TestBinder drives the Binder with a hand-fed ledger and lister, so that
// the informer can be made to lag or disagree with the API server at will.
func TestBinder(t *testing.T) {
	tests := []struct {
		name string
		// api are the pods the API server has; cached what the informer shows.
		api, cached []*v1.Pod
		// hint is a need remembered by filter for the bound pod.
		hint int64
		// reservedOn is a node the pod already holds a reservation on.
		reservedOn string
		fail       func(*v1.Binding) error
		// gate is the binder lease's answer; throttle the rate limit's.
		gate, throttle error
		bind           BindRequest
		wantErr        string
		wantCalls      int
		wantResult     string
		// wantReserved on node a after the bind.
		wantReserved int64
		wantExpiring bool
	}{
		{
			name: "binds and keeps the reservation", api: []*v1.Pod{pod("p", "", 1)}, cached: []*v1.Pod{pod("p", "", 1)},
			bind: bindArgs(pod("p", "", 1), "a"), wantCalls: 1, wantResult: BindBound, wantReserved: 1,
		},
		{
			name: "already bound to the node in the cache", api: []*v1.Pod{pod("p", "a", 1)}, cached: []*v1.Pod{pod("p", "a", 1)},
			bind: bindArgs(pod("p", "", 1), "a"), wantCalls: 0, wantResult: BindAlreadyBound,
		},
		{
			name: "bound elsewhere in the cache", api: []*v1.Pod{pod("p", "b", 1)}, cached: []*v1.Pod{pod("p", "b", 1)},
			bind: bindArgs(pod("p", "", 1), "a"), wantErr: "already bound to node b", wantResult: BindError,
		},
		{
			name: "no room at the re-check", api: []*v1.Pod{pod("p", "", 3)}, cached: []*v1.Pod{pod("p", "", 3), pod("q", "a", 1)},
			bind: bindArgs(pod("p", "", 3), "a"), wantErr: "underlay IPs exhausted: 1/3 used, pod needs 3", wantResult: BindNoRoom,
		},
		{
			name: "conflict but the API shows it on the node: a timed-out bind landed",
			api:  []*v1.Pod{pod("p", "a", 1)}, cached: []*v1.Pod{pod("p", "", 1)},
			bind: bindArgs(pod("p", "", 1), "a"), wantCalls: 1, wantResult: BindAlreadyBound, wantReserved: 1,
		},
		{
			name: "conflict, bound to another node: released",
			api:  []*v1.Pod{pod("p", "b", 1)}, cached: []*v1.Pod{pod("p", "", 1)},
			bind: bindArgs(pod("p", "", 1), "a"), wantCalls: 1, wantErr: "already assigned", wantResult: BindError,
		},
		{
			name: "definite failure releases", api: []*v1.Pod{pod("p", "", 1)}, cached: []*v1.Pod{pod("p", "", 1)},
			fail: func(b *v1.Binding) error {
				return apierrors.NewForbidden(v1.Resource("pods/binding"), b.Name, fmt.Errorf("no"))
			},
			bind: bindArgs(pod("p", "", 1), "a"), wantCalls: 1, wantErr: "forbidden", wantResult: BindError,
		},
		{
			name: "timeout keeps an expiring reservation", api: []*v1.Pod{pod("p", "", 1)}, cached: []*v1.Pod{pod("p", "", 1)},
			fail: func(b *v1.Binding) error { return apierrors.NewTimeoutError("slow etcd", 1) },
			bind: bindArgs(pod("p", "", 1), "a"), wantCalls: 1, wantErr: "slow etcd", wantResult: BindError,
			wantReserved: 1, wantExpiring: true,
		},
		{
			name: "recreated pod (UID changed)", api: []*v1.Pod{pod("p", "", 1)}, cached: []*v1.Pod{pod("p", "", 1)},
			bind:    BindRequest{Name: "p", Namespace: "ns", UID: "old", Node: "a"},
			wantErr: "recreated", wantResult: BindError,
		},
		{
			name: "informer lags: the need filter saw is used", api: []*v1.Pod{pod("p", "", 1)}, hint: 1,
			bind: bindArgs(pod("p", "", 1), "a"), wantCalls: 1, wantResult: BindBound, wantReserved: 1,
		},
		{
			name: "filter never saw it (restart): the pod is read once", api: []*v1.Pod{pod("p", "", 1)},
			bind: bindArgs(pod("p", "", 1), "a"), wantCalls: 1, wantResult: BindBound, wantReserved: 1,
		},
		{
			name: "filter never saw it and it is gone", api: []*v1.Pod{pod("q", "", 1)},
			bind: bindArgs(pod("p", "", 1), "a"), wantErr: `reading pod ns/p: pods "p" not found`, wantResult: BindError,
		},
		{
			name: "filter never saw it and the API shows it recreated", api: []*v1.Pod{pod("p", "", 1)},
			bind:    BindRequest{Name: "p", Namespace: "ns", UID: "old", Node: "a"},
			wantErr: "recreated", wantResult: BindError,
		},
		{
			name: "filter never saw it and the API shows it bound there", api: []*v1.Pod{pod("p", "a", 1)},
			bind: bindArgs(pod("p", "", 1), "a"), wantResult: BindAlreadyBound,
		},
		{
			name: "an unsettled bind to another node blocks", api: []*v1.Pod{pod("p", "", 1)}, cached: []*v1.Pod{pod("p", "", 1)},
			reservedOn: "b", bind: bindArgs(pod("p", "", 1), "a"), wantErr: "bind of this pod to node b is in flight", wantResult: BindError,
		},
		{
			name: "a retry to the same node replaces its reservation", api: []*v1.Pod{pod("p", "", 3)}, cached: []*v1.Pod{pod("p", "", 3)},
			reservedOn: "a", bind: bindArgs(pod("p", "", 3), "a"), wantCalls: 1, wantResult: BindBound, wantReserved: 3,
		},
		{
			name: "another binder holds the lease: refused, nothing reserved", api: []*v1.Pod{pod("p", "", 1)}, cached: []*v1.Pod{pod("p", "", 1)},
			gate: fmt.Errorf(`another underlay-IP binder, "kube-scheduler", holds the Lease`),
			bind: bindArgs(pod("p", "", 1), "a"), wantErr: `"kube-scheduler", holds the Lease`, wantResult: BindNotBinder,
		},
		{
			name: "another binder holds the lease: an already bound pod is still a success", api: []*v1.Pod{pod("p", "a", 1)}, cached: []*v1.Pod{pod("p", "a", 1)},
			gate: fmt.Errorf("not the binder"),
			bind: bindArgs(pod("p", "", 1), "a"), wantResult: BindAlreadyBound,
		},
		{
			name: "the rate limit did not admit the Binding: not sent, nothing reserved", api: []*v1.Pod{pod("p", "", 1)}, cached: []*v1.Pod{pod("p", "", 1)},
			throttle: context.Canceled,
			bind:     bindArgs(pod("p", "", 1), "a"), wantErr: "not sent", wantResult: BindNotSent,
		},
		{
			name: "pod without need binds without reserving", api: []*v1.Pod{pod("p", "", 0)}, cached: []*v1.Pod{pod("p", "", 0)},
			bind: bindArgs(pod("p", "", 0), "a"), wantCalls: 1, wantResult: BindBound,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			for _, p := range tc.api {
				objs = append(objs, p)
			}
			cs := fake.NewClientset(objs...)
			api := &bindingAPI{Fail: tc.fail}
			api.Install(cs)
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			l := newTestLedger([]*v1.Node{node("a", "3"), node("b", "3")}, tc.cached)
			for _, p := range tc.cached {
				if err := indexer.Add(p); err != nil {
					t.Fatal(err)
				}
			}
			if tc.reservedOn != "" {
				if r := l.Reserve(tc.bind.UID, "ns", "p", tc.reservedOn, underlay.PodNeed(tc.api[0])); !r.Verdict.Fit {
					t.Fatalf("setup reservation: %+v", r)
				}
			}
			if tc.hint > 0 {
				l.RememberNeed(tc.bind.UID, tc.hint)
			}
			b := NewBinder(cs, IndexerLookup(indexer), l)
			b.Gate = func() (time.Time, error) { return time.Now().Add(time.Minute), tc.gate }
			b.Throttle = func(context.Context) error { return tc.throttle }
			out := b.Bind(context.Background(), tc.bind)
			err := out.Err
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Bind: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Bind error = %v, want one containing %q", err, tc.wantErr)
			}
			if api.Calls != tc.wantCalls {
				t.Errorf("Binding creates = %d, want %d", api.Calls, tc.wantCalls)
			}
			if out.Result != tc.wantResult {
				t.Errorf("result %q, want %q", out.Result, tc.wantResult)
			}
			if u := l.Usage("a"); u.Reserved != tc.wantReserved {
				t.Errorf("reserved on a = %d, want %d", u.Reserved, tc.wantReserved)
			}
			l.mu.RLock()
			r := l.reservations[tc.bind.UID]
			l.mu.RUnlock()
			if expiring := r != nil && !r.expires.IsZero(); expiring != tc.wantExpiring {
				t.Errorf("reservation expiring = %v, want %v", expiring, tc.wantExpiring)
			}
			// A reservation kept after a Binding known to have landed is
			// confirmed, for the reconciler (reconcile.go).
			if confirmed, want := r != nil && !r.confirmed.IsZero(), tc.wantReserved > 0 && !tc.wantExpiring; confirmed != want {
				t.Errorf("reservation confirmed = %v, want %v", confirmed, want)
			}
		})
	}
}

// TestBinderBoundByTheLease: the Binding's request, its wait for the rate
// limit included, ends when the binder lease's validity does, so that no
// Binding is sent after another binder ID could hold the lease.
func TestBinderBoundByTheLease(t *testing.T) {
	cs := fake.NewClientset(pod("p", "", 1))
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(pod("p", "", 1)); err != nil {
		t.Fatal(err)
	}
	b := NewBinder(cs, IndexerLookup(indexer), newTestLedger([]*v1.Node{node("a", "3")}, nil))
	until := time.Now().Add(3 * time.Second)
	b.Gate = func() (time.Time, error) { return until, nil }
	var deadline time.Time
	b.Throttle = func(ctx context.Context) error {
		deadline, _ = ctx.Deadline()
		return nil
	}
	if out := b.Bind(context.Background(), bindArgs(pod("p", "", 1), "a")); out.Err != nil {
		t.Fatalf("Bind: %v", out.Err)
	}
	if !deadline.Equal(until) {
		t.Fatalf("the bind's deadline is %v, want the lease's validity %v", deadline, until)
	}
}
