package stack

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
)

// AdapterService is the Service name the APIService points at.
const AdapterService = "capscale-metrics-adapter"

// ServingCertSecret is the Secret the adapter makes its certificate in
// with AdapterManagedCert.
const ServingCertSecret = "capscale-serving-cert"

func (s *Stack) startAdapter(ctx context.Context) error {
	kc, err := s.componentKubeconfig(ctx, "metrics-adapter/rbac.yaml", "capscale-metrics-adapter")
	if err != nil {
		return err
	}
	cert, err := s.ServingCert("metrics-adapter", AdapterService+"."+Namespace+".svc", "localhost")
	if err != nil {
		return err
	}
	for i := range max(1, s.Opts.AdapterReplicas) {
		port, err := plane.FreePort()
		if err != nil {
			return err
		}
		args := []string{
			fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1",
			"--tls-cert-file=" + cert.CertFile, "--tls-private-key-file=" + cert.KeyFile,
			"--lister-kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--v=2",
		}
		if s.Opts.AdapterManagedCert {
			args = append(args[:2], "--serving-cert-secret="+Namespace+"/"+ServingCertSecret,
				"--serving-cert-apiservice-service="+Namespace+"/"+AdapterService)
			args = append(args, "--lister-kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc, "--v=2")
		}
		if s.Opts.AdapterConfig != "" {
			args = append(args, "--config="+s.Opts.AdapterConfig)
		}
		r := &AdapterReplica{Index: i, Port: port, URL: fmt.Sprintf("https://127.0.0.1:%d", port), args: append(args, s.Opts.AdapterArgs...)}
		if err := s.startAdapterReplica(ctx, r); err != nil {
			return err
		}
		s.Adapters = append(s.Adapters, r)
	}
	s.Adapter, s.AdapterURL = s.Adapters[0].Proc, s.Adapters[0].URL
	if len(s.Adapters) > 1 {
		return s.registerAdapterReplicas(ctx)
	}
	return s.registerAPIService(ctx, s.Adapters[0].Port)
}

// registerAPIService makes the aggregator route external.metrics.k8s.io to
// the adapter on 127.0.0.1, taking the APIService over if another server
// owns it, as `kubectl apply` of deploy/ would.
func (s *Stack) registerAPIService(ctx context.Context, port int) error {
	if err := s.LocalService(ctx, Namespace, AdapterService, port); err != nil {
		return err
	}
	return s.RouteAPIService(ctx, Namespace, AdapterService)
}

// LocalService creates a selector-less Service ns/name (port 443 named
// https) and an FQDN EndpointSlice that sends it to 127.0.0.1:port (IPv4
// loopback endpoints are rejected); the aggregator, with
// --enable-aggregator-routing, dials that.
func (s *Stack) LocalService(ctx context.Context, ns, name string, port int) error {
	cs := s.Client
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Service %s/%s: %w", ns, name, err)
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-local", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating EndpointSlice of %s/%s: %w", ns, name, err)
	}
	return nil
}

// RouteAPIService points v1beta1.external.metrics.k8s.io at the Service
// ns/name with the cluster CA as caBundle (creating it, or updating its spec
// and keeping its annotations), and waits until it is Available.
func (s *Stack) RouteAPIService(ctx context.Context, ns, name string) error {
	ac, err := aggregator.NewForConfig(s.Config)
	if err != nil {
		return err
	}
	spec := apiregv1.APIServiceSpec{
		Service:              &apiregv1.ServiceReference{Namespace: ns, Name: name, Port: ptr.To(int32(443))},
		Group:                "external.metrics.k8s.io",
		Version:              "v1beta1",
		CABundle:             s.PKI.ClusterCA.CAData(),
		GroupPriorityMinimum: 100,
		VersionPriority:      100,
	}
	if s.Opts.AdapterManagedCert && ns == Namespace && name == AdapterService {
		// The adapter writes it, as after a helm install.
		spec.CABundle = nil
	}
	apis := ac.ApiregistrationV1().APIServices()
	got, err := apis.Get(ctx, "v1beta1.external.metrics.k8s.io", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		api := &apiregv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.external.metrics.k8s.io"}, Spec: spec}
		if _, err := apis.Create(ctx, api, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating APIService: %w", err)
		}
	case err != nil:
		return err
	default:
		got.Spec = spec
		if _, err := apis.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("taking the APIService over: %w", err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := apis.Get(ctx, "v1beta1.external.metrics.k8s.io", metav1.GetOptions{})
		if err != nil || got.Spec.Service == nil || got.Spec.Service.Namespace != ns || got.Spec.Service.Name != name {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiregv1.Available && c.Status == apiregv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

func (s *Stack) startWorkloadAPI(ctx context.Context) error {
	kc, err := s.componentKubeconfig(ctx, "workload-api/rbac.yaml", "capscale-workload-api")
	if err != nil {
		return err
	}
	// The example Roles for callers come with the API, as in deploy/'s
	// kustomization: the demo binds its console to one of them.
	if _, err := s.Kubectl(ctx, "apply", "-f", DeployFile("workload-api/roles.yaml")); err != nil {
		return err
	}
	port, err := plane.FreePort()
	if err != nil {
		return err
	}
	cert, err := s.ServingCert("workload-api", "capscale-workload-api."+Namespace+".svc", "localhost")
	if err != nil {
		return err
	}
	s.WorkloadAPIURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	args := []string{
		fmt.Sprintf("--bind-address=127.0.0.1:%d", port), "--kubeconfig=" + kc,
		"--tls-cert-file=" + cert.CertFile, "--tls-private-key-file=" + cert.KeyFile, "--v=2",
	}
	s.workloadArgs = append(args, s.Opts.WorkloadArgs...)
	return s.runWorkloadAPI(ctx, "workload-api")
}

func (s *Stack) runWorkloadAPI(ctx context.Context, name string) error {
	proc, err := s.StartProcess(name, filepath.Join(s.Opts.BinDir, "workload-api"), s.workloadArgs...)
	if err != nil {
		return err
	}
	s.WorkloadAPI = proc
	return s.waitReady(ctx, proc, s.WorkloadAPIURL+"/readyz")
}

// RestartWorkloadAPI starts the workload API again on its port with its
// arguments, as the Deployment controller would replace its pod, and waits
// until it is ready. Kill it first with WorkloadAPI.Kill().
func (s *Stack) RestartWorkloadAPI(ctx context.Context) error {
	s.workloadStarts++
	return s.runWorkloadAPI(ctx, fmt.Sprintf("workload-api-start-%d", s.workloadStarts))
}

func newGet(ctx context.Context, url string) (*http.Request, error) {
	return http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
}
