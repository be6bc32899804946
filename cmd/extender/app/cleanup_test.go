package app

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/capscale/capscale/extender/release"
)

// TestCleanup: release-cleanup deletes the policy and its binding, then
// ends once no pod carries the finalizer; other finalizers stay.
func TestCleanup(t *testing.T) {
	meta := metav1.ObjectMeta{Name: release.Policy}
	cs := fake.NewClientset(
		&admissionv1.MutatingAdmissionPolicy{ObjectMeta: meta},
		&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: meta},
		&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "a", Finalizers: []string{release.Finalizer, "example.com/keep"}},
			Spec: v1.PodSpec{NodeName: "n"}, Status: v1.PodStatus{Phase: v1.PodRunning}},
	)
	ctx := context.Background()
	if err := cleanup(ctx, cs, 10*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	a := cs.AdmissionregistrationV1()
	if _, err := a.MutatingAdmissionPolicies().Get(ctx, release.Policy, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("MutatingAdmissionPolicy: %v, want it deleted", err)
	}
	if _, err := a.MutatingAdmissionPolicyBindings().Get(ctx, release.Policy, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("MutatingAdmissionPolicyBinding: %v, want it deleted", err)
	}
	p, err := cs.CoreV1().Pods("ns").Get(ctx, "a", metav1.GetOptions{})
	if err != nil || len(p.Finalizers) != 1 || p.Finalizers[0] != "example.com/keep" {
		t.Errorf("pod a: finalizers %v (%v), want only example.com/keep", p.Finalizers, err)
	}
	// Again, with nothing left: idempotent.
	if err := cleanup(ctx, cs, 10*time.Second, 0); err != nil {
		t.Errorf("a second cleanup: %v", err)
	}
}

// TestCleanupOptions: --wait shorter than the apiservers' settle is refused.
func TestCleanupOptions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{args: []string{"--wait=1s"}, err: "--wait 1s: at least 5s"},
		{args: []string{"--wait=1m"}},
	} {
		cmd := newReleaseCleanupCommand(context.Background())
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		o := &cleanupOptions{}
		o.wait, _ = cmd.Flags().GetDuration("wait")
		err := o.validate()
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.err)
		}
	}
}

// TestCleanupDone: it ends only with the cache synced, empty and settled.
func TestCleanupDone(t *testing.T) {
	for _, tc := range []struct {
		synced   bool
		carrying int
		since    time.Duration
		want     bool
	}{
		{synced: false, since: time.Minute},
		{synced: true, carrying: 1, since: time.Minute},
		{synced: true, since: time.Second},
		{synced: true, since: Settle, want: true},
	} {
		if got := cleanupDone(tc.synced, tc.carrying, tc.since, Settle); got != tc.want {
			t.Errorf("cleanupDone(%v, %d, %v) = %v, want %v", tc.synced, tc.carrying, tc.since, got, tc.want)
		}
	}
}
