package kubectl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/internal/names"
)

// externalMetricsPath is the external-metrics API's version root.
const externalMetricsPath = "/apis/external.metrics.k8s.io/v1beta1"

type checkOptions struct {
	scheduler string
	image     string
	metrics   []string
	// external: check the external-metrics API at all.
	external bool
	timeout  time.Duration
}

func newCheckCommand(s *session) *cobra.Command {
	o := checkOptions{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that capscale answers: an underlay pod scheduled, external metrics read",
		Long: `check creates a probe pod in the namespace that asks for one
capscale.io/underlay-ip and names capscale's scheduler, waits until that
scheduler has bound it (or refused it with capscale's reason: the cluster is
full, and capscale said so), and deletes it; then it reads each --metric
through the external-metrics API (the aggregator, to capscale's adapter), or
without --metric, that API's list of metrics. It fails on the first check
that does not pass, saying which. The chart's helm test runs it.
It needs create, get and delete on pods in the namespace and list on the
external metrics it reads (a read with a label selector is a list):
ClusterRole capscale-kubectl:check, bound in the namespace.`,
		Example: `  kubectl capscale check -n capscale-system --image registry.example/capscale:v0.1.0
  kubectl capscale check -n shop --image registry.example/capscale:v0.1.0 --metric capscale-load-index:source=shop-load
  kubectl capscale check -n shop --scheduler-name "" --metric capscale-load-index:source=shop-load`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			ns, err := s.namespace()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if o.scheduler != "" {
				line, err := checkScheduling(ctx, c, ns, o, s.streams.ErrOut)
				if err != nil {
					return explain(err, "check", false)
				}
				fmt.Fprintln(s.streams.Out, line)
			}
			if o.external {
				lines, err := checkMetrics(ctx, c, ns, o.metrics)
				if err != nil {
					return explain(err, "check", false)
				}
				for _, l := range lines {
					fmt.Fprintln(s.streams.Out, l)
				}
			}
			fmt.Fprintln(s.streams.Out, "ok")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.scheduler, "scheduler-name", "capscale-scheduler", `the scheduler the probe pod names; "" skips the scheduling check`)
	f.StringVar(&o.image, "image", "", "the probe pod's image (it runs /kubectl-capscale --version); required with a scheduler")
	f.StringArrayVar(&o.metrics, "metric", nil, "an external metric to read, NAME or NAME:SELECTOR (a label selector, e.g. source=web); repeatable")
	f.BoolVar(&o.external, "external-metrics", true, "check the external-metrics API; false skips it (capscale does not serve it: apiService.create=false)")
	f.DurationVar(&o.timeout, "timeout", time.Minute, "how long the scheduler may take to bind or refuse the probe pod")
	return cmd
}

func (o checkOptions) validate() error {
	if o.scheduler != "" && o.image == "" {
		return fmt.Errorf("--image is required for the scheduling check (or --scheduler-name \"\" to skip it)")
	}
	if !o.external && len(o.metrics) > 0 {
		return fmt.Errorf("--metric reads the external-metrics API, which --external-metrics=false skips")
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", o.timeout)
	}
	for _, m := range o.metrics {
		if name, _, _ := strings.Cut(m, ":"); name == "" {
			return fmt.Errorf("--metric %q names no metric", m)
		}
	}
	return nil
}

// probePod is the pod check schedules: one underlay IP, the scheduler's
// name, nothing mounted, done at once if it ever runs.
func probePod(ns, scheduler, image string) *corev1.Pod {
	ip := resource.MustParse("1")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "capscale-check-", Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/name": "capscale-check", "app.kubernetes.io/part-of": "capscale"}},
		Spec: corev1.PodSpec{
			SchedulerName:                scheduler,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "probe", Image: image, Command: []string{"/kubectl-capscale", "--version"},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{names.UnderlayIPResource: ip},
					Limits:   corev1.ResourceList{names.UnderlayIPResource: ip},
				},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
}

// scheduled says what the scheduler did with the probe pod: bound it, or
// refused it for want of underlay IPs (capscale's rule ran: a full cluster
// is a working capscale); done false while neither.
func scheduled(p *corev1.Pod) (line string, done bool) {
	if p.Spec.NodeName != "" {
		return fmt.Sprintf("pod %s/%s: scheduled on %s by %s", p.Namespace, p.Name, p.Spec.NodeName, p.Spec.SchedulerName), true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "underlay IP") {
			return fmt.Sprintf("pod %s/%s: refused by %s for want of underlay IPs: %s", p.Namespace, p.Name, p.Spec.SchedulerName, c.Message), true
		}
	}
	return "", false
}

func checkScheduling(ctx context.Context, c kubernetes.Interface, ns string, o checkOptions, errOut io.Writer) (string, error) {
	p, err := c.CoreV1().Pods(ns).Create(ctx, probePod(ns, o.scheduler, o.image), metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating the probe pod in %s: %w", ns, err)
	}
	defer func() {
		// The pod goes even when the check was cancelled; gracefully, never
		// forced: a force-deleted pod leaves the API while its node still
		// holds its IP, and capscale would count it free too early.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := c.CoreV1().Pods(ns).Delete(dctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			fmt.Fprintf(errOut, "Warning: deleting probe pod %s/%s: %v\n", ns, p.Name, err)
			return
		}
		// Gone before check ends: it holds its IP until then, and what
		// the operator looks at next should not count it.
		err := wait.PollUntilContextTimeout(dctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			fmt.Fprintf(errOut, "Warning: probe pod %s/%s not gone yet: %v\n", ns, p.Name, err)
		}
	}()
	var line string
	last := p
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, o.timeout, true, func(ctx context.Context) (bool, error) {
		got, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = got
		var done bool
		line, done = scheduled(got)
		return done, nil
	})
	if err != nil {
		why := "no condition"
		for _, c := range last.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				why = c.Reason + ": " + c.Message
			}
		}
		return "", fmt.Errorf("probe pod %s/%s: %s neither bound it nor refused it for underlay IPs in %s (%s): is it running?", ns, p.Name, o.scheduler, o.timeout, why)
	}
	return line, nil
}

// checkMetrics reads each metric (NAME[:SELECTOR]) in ns through the
// external-metrics API, one line each; with none, that API's list.
func checkMetrics(ctx context.Context, c kubernetes.Interface, ns string, metrics []string) ([]string, error) {
	// JSON, as custom-metrics-apiserver answers; any REST client will do
	// for a path of another group.
	rc := c.CoreV1().RESTClient()
	if len(metrics) == 0 {
		b, err := rc.Get().AbsPath(externalMetricsPath).SetHeader("Accept", "application/json").DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing the external metrics (%s): %w", externalMetricsPath, statusError(b, err))
		}
		var list metav1.APIResourceList
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", externalMetricsPath, err)
		}
		for _, r := range list.APIResources {
			if r.Name == names.LoadIndexMetric {
				return []string{fmt.Sprintf("external metrics API: %d metrics, %s among them", len(list.APIResources), names.LoadIndexMetric)}, nil
			}
		}
		return nil, fmt.Errorf("the external metrics API lists no %s: it is not capscale's adapter that answers (%d metrics)", names.LoadIndexMetric, len(list.APIResources))
	}
	var out []string
	for _, m := range metrics {
		name, sel, _ := strings.Cut(m, ":")
		req := rc.Get().AbsPath(externalMetricsPath, "namespaces", ns, name).SetHeader("Accept", "application/json")
		if sel != "" {
			req = req.Param("labelSelector", sel)
		}
		b, err := req.DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading external metric %s in %s: %w", describeMetric(name, sel), ns, statusError(b, err))
		}
		var list struct {
			Items []struct {
				Value resource.Quantity `json:"value"`
			} `json:"items"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, fmt.Errorf("decoding external metric %s: %w", describeMetric(name, sel), err)
		}
		if len(list.Items) == 0 {
			return nil, fmt.Errorf("external metric %s in %s: no value", describeMetric(name, sel), ns)
		}
		out = append(out, fmt.Sprintf("external metric %s in %s: %s", describeMetric(name, sel), ns, list.Items[0].Value.String()))
	}
	return out, nil
}

// statusError is err with the message of the Status in body, when it holds
// one: DoRaw's own error for an aggregated API's Status says only
// "unknown", which hides a 403 or a 503 and its reason.
func statusError(body []byte, err error) error {
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Message != "" {
		return statusMessage{msg: fmt.Sprintf("%s (%d %s)", st.Message, st.Code, st.Reason), status: &apierrors.StatusError{ErrStatus: st}}
	}
	return err
}

// statusMessage reads as the Status's message and code and is still that
// Status to errors.As, so that explain names the Role a 403 lacks.
type statusMessage struct {
	msg    string
	status *apierrors.StatusError
}

func (e statusMessage) Error() string { return e.msg }
func (e statusMessage) Unwrap() error { return e.status }

func describeMetric(name, sel string) string {
	if sel == "" {
		return name
	}
	return name + "{" + sel + "}"
}
