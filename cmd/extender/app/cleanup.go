package app

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/extender/release"
	"github.com/capscale/capscale/internal/kube"
)

// Settle is how long release-cleanup goes on after the policy is deleted
// before it may end: each kube-apiserver drops the policy from its own
// watch-fed cache, so a pod admitted meanwhile may still get the finalizer.
const Settle = 5 * time.Second

// cleanupOptions are the flags of `extender release-cleanup`.
type cleanupOptions struct {
	kubeconfig string
	wait       time.Duration
}

func (o *cleanupOptions) validate() error {
	if o.wait < Settle {
		return fmt.Errorf("--wait %v: at least %v, the time the apiservers take to drop the policy", o.wait, Settle)
	}
	return nil
}

// newReleaseCleanupCommand is `extender release-cleanup`, run before
// capscale's release finalizer goes (the chart's pre-delete and pre-upgrade
// hook): after it no publisher removes the finalizer, and a pod that keeps
// it hangs Terminating for good, with its namespace.
func newReleaseCleanupCommand(ctx context.Context) *cobra.Command {
	o := &cleanupOptions{wait: 90 * time.Second}
	cmd := &cobra.Command{
		Use:   "release-cleanup",
		Short: "Stop putting the finalizer " + release.Finalizer + " on pods, then remove it from every pod",
		Long: `release-cleanup deletes the MutatingAdmissionPolicy ` + release.Policy + ` and its
binding, so that no new pod gets the finalizer ` + release.Finalizer + `, then
removes it from every pod: at once from a pod not being deleted, and from a
pod being deleted once its node gave its IPs back (as the publisher does),
or when --wait is over at the latest. Run it before capscale's native
publisher goes away (helm uninstall runs it as a hook).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			cfg, err := kube.RESTConfig(o.kubeconfig, "extender-release-cleanup")
			if err != nil {
				return err
			}
			cs, err := kube.Clientset(cfg)
			if err != nil {
				return err
			}
			if err := cleanup(ctx, cs, o.wait, Settle); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: no pod carries %s, and %s is gone\n", release.Finalizer, release.Policy)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig file; empty uses the in-cluster config.")
	f.DurationVar(&o.wait, "wait", o.wait, "How long a pod being deleted may keep the finalizer while its node may still hold its IPs; then it goes anyway.")
	return cmd
}

// cleanup deletes the policy and its binding, then removes the finalizer
// until no pod carries it and settle has passed; it fails, naming the
// pods, if some still do a little after wait.
func cleanup(ctx context.Context, cs kubernetes.Interface, wait, settle time.Duration) error {
	start := time.Now()
	if err := deletePolicy(ctx, cs); err != nil {
		return err
	}
	klog.InfoS("Deleted the policy that puts the finalizer on pods", "policy", release.Policy)
	factory := kube.InformerFactory(cs)
	if _, err := extender.NodeInformer(factory); err != nil {
		return err
	}
	r, err := release.NewCleanup(cs, factory.Core().V1().Nodes(), start.Add(wait))
	if err != nil {
		return err
	}
	// The last removals may take a few seconds past the deadline.
	ctx, cancel := context.WithTimeout(ctx, wait+15*time.Second)
	defer cancel()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var left []string
	err = waitUntil(ctx, func() bool {
		var synced bool
		left, synced = r.Carrying()
		return cleanupDone(synced, len(left), time.Since(start), settle)
	})
	if err != nil {
		return fmt.Errorf("pods still carry the finalizer %s after %v: %s; remove it by hand (kubectl patch pod NAME -n NAMESPACE --type=json -p '[{\"op\":\"remove\",\"path\":\"/metadata/finalizers/INDEX\"}]'): %w",
			release.Finalizer, wait, summarize(left), err)
	}
	return nil
}

// cleanupDone: the cache synced, no pod in it carries the finalizer, and
// the apiservers had settle to drop the policy.
func cleanupDone(synced bool, carrying int, since, settle time.Duration) bool {
	return synced && carrying == 0 && since >= settle
}

func waitUntil(ctx context.Context, done func() bool) error {
	return wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) { return done(), nil })
}

// deletePolicy deletes the binding first: without it the policy applies to
// no pod.
func deletePolicy(ctx context.Context, cs kubernetes.Interface) error {
	a := cs.AdmissionregistrationV1()
	if err := a.MutatingAdmissionPolicyBindings().Delete(ctx, release.Policy, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting MutatingAdmissionPolicyBinding %s: %w", release.Policy, err)
	}
	if err := a.MutatingAdmissionPolicies().Delete(ctx, release.Policy, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting MutatingAdmissionPolicy %s: %w", release.Policy, err)
	}
	return nil
}

// summarize names at most 10 pods.
func summarize(pods []string) string {
	if len(pods) == 0 {
		return "none listed (the pod cache never synced)"
	}
	if len(pods) > 10 {
		return strings.Join(pods[:10], ", ") + fmt.Sprintf(" and %d more", len(pods)-10)
	}
	return strings.Join(pods, ", ")
}
