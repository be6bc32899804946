package stack

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/internal/names"
)

// DefaultPolicies are deploy/'s files of the admission policies the chart
// installs by default (deploy/'s TestLocalUpAppliesTheChartsPolicies keeps
// the two lists equal): the MutatingAdmissionPolicies that mark the pods of
// namespaces labelled capscale.io/underlay=true, and the
// ValidatingAdmissionPolicy that holds capscale-controller's Node writes.
var DefaultPolicies = []string{"admission/underlay-ip.yaml", "admission/scheduler-name.yaml", "controller/node-writes.yaml"}

// ApplyDefaultPolicies applies DefaultPolicies, as `make local-up` does, so
// that the local plane admits pods as an installed cluster would; in DRA
// mode, as the chart, without the one that moves pods to capscale-scheduler.
func (s *Stack) ApplyDefaultPolicies(ctx context.Context) error {
	for _, f := range DefaultPolicies {
		if s.Opts.DRA && f == "admission/scheduler-name.yaml" {
			// DRA mode: default-scheduler counts the IP itself, as the
			// chart leaves its pods there.
			continue
		}
		if out, err := s.Kubectl(ctx, "apply", "-f", DeployFile(f)); err != nil {
			return fmt.Errorf("applying %s: %w\n%s", f, err, out)
		}
	}
	return nil
}

// waitReleasePolicy waits until kube-apiserver, which loads policies
// asynchronously, gives a pod that asks for an underlay IP native mode's
// release finalizer (a dry run).
func (s *Stack) waitReleasePolicy(ctx context.Context) error {
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "release-policy-probe"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "probe", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{names.UnderlayIPResource: resource.MustParse("1")}}}}}}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := s.Client.CoreV1().Pods(Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		last = err
		return err == nil && slices.Contains(got.Finalizers, names.UnderlayIPReleaseFinalizer), nil
	})
	if err != nil {
		return fmt.Errorf("native/release.yaml's policy never gave a pod its finalizer: %w (last create: %v)", err, last)
	}
	return nil
}
