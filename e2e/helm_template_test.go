//go:build e2e

package e2e

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/loadsource"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// TestHelmTemplateLeavesForeignAPIService (issue 50): a GitOps install
// (`helm template … | kubectl apply --server-side`, as Argo CD renders) cannot
// see the cluster, so the decision about the external-metrics APIService
// belongs to the running adapter. With KEDA (its own operator and metrics
// server) owning it and scaling a Deployment: the applied render leaves it
// as it was, Available; the adapter, run with the render's flags as the
// render's ServiceAccount, logs why it leaves it alone; with
// apiService.delegate=true it takes it over and forwards KEDA's metric. Given back by `preflight --restore`,
// no restart of that install's adapter takes it again; unregistered, the
// adapter registers it, owned by the install's ClusterRole, and it goes with
// that ClusterRole. kwok nodes run no container: the adapter runs as a
// process behind the chart's Service.
func TestHelmTemplateLeavesForeignAPIService(t *testing.T) {
	ctx := testContext(t, 8*time.Minute)
	s := startStack(t, stack.Options{Plane: plane.Options{Nodes: 1, Logf: t.Logf, HPASyncPeriod: 2 * time.Second}})
	if err := s.WaitForNamespace(ctx, adapterNS); err != nil {
		t.Fatal(err)
	}
	ac, apiService := externalMetricsAPIServiceOf(ctx, t, s.Config)
	if _, err := s.StartKEDA(ctx, kedaBinDir(t, s), stack.KEDAOptions{}); err != nil {
		t.Fatalf("starting KEDA: %v", err)
	}
	original := apiService()
	// KEDA scales a Deployment on a metrics-api trigger (30 / 10 = 3): the
	// metric its HPA reads is the one capscale must leave or forward.
	src := &loadsource.Source{}
	src.Set(30)
	srv := httptest.NewServer(src)
	t.Cleanup(srv.Close)
	scaleQueueWithKEDA(ctx, t, s, srv.URL)
	kedaHPA, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Get(ctx, "keda-hpa-queue", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("KEDA's HPA: %v", err)
	}
	metric := kedaHPA.Spec.Metrics[0].External.Metric
	selector := metav1.FormatLabelSelector(metric.Selector)
	helm := helmCommand(ctx, t, s.Plane)
	// What Argo CD passes helm template: the cluster's version and APIs.
	version, err := s.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	// render is `helm template` of the chart with values; apply applies it
	// as a GitOps tool would, and points the chart's adapter Service at the
	// adapter process (kwok pods serve nothing).
	render := func(values ...string) (file string, flags []string) {
		t.Helper()
		args := []string{"template", "capscale", filepath.Join("deploy", "helm", "capscale"), "--set", "extender.mode=native",
			"--kube-version", version.GitVersion, "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"}
		for _, v := range values {
			args = append(args, "--set", v)
		}
		out, err := helm(args...)
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, out)
		}
		if strings.Contains(out, "kind: APIService\n") || strings.Contains(out, "capscale-apiservice-restore") {
			t.Fatalf("a render that cannot see the cluster holds the APIService or the uninstall hook")
		}
		file = filepath.Join(t.TempDir(), "capscale.yaml")
		if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		return file, adapterFlags(t, out)
	}
	apply := func(file string) {
		t.Helper()
		if out, err := s.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", file); err != nil {
			t.Fatalf("kubectl apply --server-side of the render: %v\n%s", err, out)
		}
		if out, err := s.Kubectl(ctx, "-n", stack.Namespace, "patch", "service", stack.AdapterService, "--type=json", "-p", `[{"op":"remove","path":"/spec/selector"}]`); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		// While the applied Service had its selector, the endpoints
		// controllers gave it the kwok pods' addresses, which serve nothing,
		// and leave them when the selector goes: the Endpoints object, which
		// the mirroring controller then copies into a slice, and the
		// EndpointSlice controller's slice. The aggregator dials a ready
		// address of any slice of the Service (ResolveEndpoint,
		// k8s.io/apiserver v0.37.2 pkg/util/proxy/proxy.go:59), so the
		// delegated metric was "service unavailable" (issue 50's first
		// attempt). Only the slice to the adapter process may stay.
		if out, err := s.Kubectl(ctx, "-n", stack.Namespace, "delete", "endpoints", stack.AdapterService, "--ignore-not-found"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := s.Client.DiscoveryV1().EndpointSlices(stack.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + stack.AdapterService})
			if err != nil {
				return false, err
			}
			only := true
			for _, es := range l.Items {
				if m := es.Labels[discoveryv1.LabelManagedBy]; m != "" {
					only = false
					t.Logf("deleting EndpointSlice %s of the render's Service (managed by %s): %v", es.Name, m, es.Endpoints)
					if err := s.Client.DiscoveryV1().EndpointSlices(stack.Namespace).Delete(ctx, es.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
						return false, err
					}
				}
			}
			return only, nil
		})
		if err != nil {
			t.Fatalf("the render's Service keeps the kwok pods' endpoints: %v", err)
		}
	}
	file, flags := render()
	apply(file)

	// The render applied: the APIService is KEDA's, Available.
	if got := apiService(); got.Spec.Service.Name != stack.KEDAMetricsService || !available(got) {
		t.Fatalf("after applying the render the APIService is %+v (available %v), want KEDA's, Available", got.Spec.Service, available(got))
	}

	port, err := plane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LocalService(ctx, stack.Namespace, stack.AdapterService, port); err != nil {
		t.Fatal(err)
	}
	kc, err := s.ServiceAccountKubeconfig(ctx, stack.Namespace, "capscale-metrics-adapter")
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	run := func(flags []string) *plane.Process {
		t.Helper()
		starts++
		args := append([]string{"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
			"--lister-kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc, "--v=2"}, flags...)
		proc, err := s.StartProcess("metrics-adapter-"+strconv.Itoa(starts), filepath.Join(capscaleBin, "metrics-adapter"), args...)
		if err != nil {
			t.Fatal(err)
		}
		return proc
	}
	waitLog := func(proc *plane.Process, text string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			b, _ := os.ReadFile(proc.LogFile)
			return strings.Contains(string(b), text), nil
		})
		if err != nil {
			t.Fatalf("the adapter never logged %q:\n%s", text, proc.Tail(30))
		}
	}

	proc := run(flags)
	waitLog(proc, "the external-metrics APIService belongs to another adapter")
	time.Sleep(3 * time.Second)
	if got := apiService(); got.Spec.Service.Name != stack.KEDAMetricsService || !available(got) || got.Annotations[names.DelegateAnnotation] != "" {
		t.Fatalf("the adapter took the APIService without delegation: %+v", got.Spec.Service)
	}
	waitMetricValue(ctx, t, s, metric.Name, selector, 30)
	proc.Stop(5 * time.Second)

	// apiService.delegate=true: the adapter takes it over and delegates.
	file, delegateFlags := render("apiService.delegate=true")
	apply(file)
	proc = run(delegateFlags)
	waitLog(proc, "Took the external-metrics APIService over in delegation mode")
	if got := apiService(); got.Spec.Service.Name != stack.AdapterService || !strings.Contains(got.Annotations[names.DelegateAnnotation], stack.KEDAMetricsService) {
		t.Fatalf("with apiService.delegate=true: %+v, record %q", got.Spec.Service, got.Annotations[names.DelegateAnnotation])
	}
	// KEDA's metric, forwarded by capscale; KEDA's HPA still scales on it.
	src.Set(50)
	waitMetricValue(ctx, t, s, metric.Name, selector, 50)
	waitReplicas(ctx, t, s, "queue", 5, 2*time.Minute, nil, nil)

	// Given back by the uninstall's restore: marked with the install's
	// identity, which no restart of its adapter takes back.
	out, err := preflight(ctx, s.Plane, "--restore")
	if err != nil || !strings.Contains(out, "restored:") {
		t.Fatalf("preflight --restore: %v\n%s", err, out)
	}
	role, err := s.Client.RbacV1().ClusterRoles().Get(ctx, "capscale:metrics-adapter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := apiService().Annotations[names.ReleasedAnnotation]; got != string(role.UID) {
		t.Fatalf("the release mark is %q, want the install's ClusterRole UID %s", got, role.UID)
	}
	proc.Stop(5 * time.Second)
	proc = run(delegateFlags)
	waitLog(proc, "not taking it over again")
	if got := apiService(); got.Spec.Service.Name != stack.KEDAMetricsService || string(got.Spec.CABundle) != string(original.Spec.CABundle) {
		t.Fatalf("a restarted adapter of the released install took the APIService back: %+v", got.Spec.Service)
	}
	src.Set(20)
	waitMetricValue(ctx, t, s, metric.Name, selector, 20)
	proc.Stop(5 * time.Second)

	// Nobody's: the adapter registers it, owned by the install's ClusterRole,
	// which takes it along when it goes.
	if err := ac.ApiregistrationV1().APIServices().Delete(ctx, externalMetricsAPIService, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	proc = run(flags)
	waitLog(proc, "Registered the external-metrics APIService")
	got := apiService()
	if got.Spec.Service.Name != stack.AdapterService || len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != role.UID {
		t.Fatalf("the registered APIService: %+v, owners %+v", got.Spec.Service, got.OwnerReferences)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return available(apiService()), nil
	})
	if err != nil {
		t.Errorf("the registered APIService never became Available: %+v", apiService().Status)
	}
	proc.Stop(5 * time.Second)
	if err := s.Client.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the registered APIService outlived its install's ClusterRole")
	}
}

// adapterFlags returns the flags of the render's capscale-metrics-adapter
// that decide about the APIService and the serving certificate.
func adapterFlags(t *testing.T, render string) []string {
	t.Helper()
	for _, doc := range strings.Split(render, "\n---\n") {
		if !strings.Contains(doc, "kind: Deployment") || !strings.Contains(doc, "name: capscale-metrics-adapter\n") {
			continue
		}
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range d.Spec.Template.Spec.Containers[0].Command {
			for _, p := range []string{"--serving-cert-", "--register-apiservice", "--delegate-existing-owner", "--installation-clusterrole"} {
				if strings.HasPrefix(a, p) {
					out = append(out, a)
				}
			}
		}
		return out
	}
	t.Fatal("the render has no capscale-metrics-adapter Deployment")
	return nil
}

func available(a *apiregv1.APIService) bool {
	for _, c := range a.Status.Conditions {
		if c.Type == apiregv1.Available {
			return c.Status == apiregv1.ConditionTrue
		}
	}
	return false
}
