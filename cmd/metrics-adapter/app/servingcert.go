package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/servingcert"
	"github.com/capscale/capscale/metricsadapter/apiservice"
)

// ServingCertOptions make the adapter create and rotate its own serving
// certificate in a Secret and keep its APIService's caBundle (issue 44),
// instead of serving --tls-cert-file.
type ServingCertOptions struct {
	// Secret is NAMESPACE/NAME; empty serves --tls-cert-file.
	Secret           string
	DNSNames         []string
	Validity         time.Duration
	CAValidity       time.Duration
	PropagationDelay time.Duration
	// APIServiceService is NAMESPACE/NAME of the Service capscale's
	// APIService routes to; empty leaves every APIService alone.
	APIServiceService string
	// DelegateOwner takes an APIService owned by another adapter over in
	// delegation mode at start, recording that adapter as the delegate.
	DelegateOwner bool
	// Register creates the APIService, routed to APIServiceService, when
	// none is registered: the adapter, not a render, decides (a `helm
	// template` render cannot see the cluster and leaves it out).
	Register bool
	// InstallationClusterRole is the adapter's ClusterRole, whose UID names
	// its install (installation.go).
	InstallationClusterRole string
}

func defaultServingCertOptions() ServingCertOptions {
	return ServingCertOptions{
		Validity: 90 * 24 * time.Hour, CAValidity: 5 * 365 * 24 * time.Hour, PropagationDelay: 5 * time.Second,
		APIServiceService:       "capscale-system/capscale-metrics-adapter",
		InstallationClusterRole: DefaultInstallationClusterRole,
	}
}

// AddFlags adds the --serving-cert-* flags.
func (o *ServingCertOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Secret, "serving-cert-secret", o.Secret,
		"NAMESPACE/NAME of a Secret in which the adapter makes and rotates its own CA and serving certificate (ca.crt, ca.key, tls.crt, tls.key), "+
			"served by the API and the KEDA scaler instead of --tls-cert-file. Empty (the default) serves --tls-cert-file.")
	fs.StringSliceVar(&o.DNSNames, "serving-cert-dns-names", o.DNSNames,
		"DNS names of the serving certificate; the first is its common name. Default: <name>.<namespace>.svc of --serving-cert-apiservice-service.")
	fs.DurationVar(&o.Validity, "serving-cert-validity", o.Validity, "Lifetime of a serving certificate; a new one is issued with a third of it left.")
	fs.DurationVar(&o.CAValidity, "serving-cert-ca-validity", o.CAValidity,
		"Lifetime of the CA; a new one joins the bundle with a third of it left, and the old one stays in the bundle until it expires.")
	fs.DurationVar(&o.PropagationDelay, "serving-cert-propagation-delay", o.PropagationDelay,
		"How long a new CA must have been in the APIService's caBundle before a certificate it signed is served.")
	fs.StringVar(&o.APIServiceService, "serving-cert-apiservice-service", o.APIServiceService,
		"NAMESPACE/NAME of capscale's adapter Service: while "+apiservice.Name+" routes to it, its caBundle is kept equal to the Secret's ca.crt "+
			"(a caBundle changed by someone else is put back). Empty leaves the APIService alone (cert-manager's CA injector keeps it).")
	fs.BoolVar(&o.DelegateOwner, "delegate-existing-owner", o.DelegateOwner,
		"With --serving-cert-secret: if another adapter (KEDA, prometheus-adapter) owns "+apiservice.Name+", take it over in delegation mode at start, "+
			"recording that adapter on the APIService as the delegate of every metric not named capscale-* (what `preflight --delegate` does; `preflight --restore` gives it back). "+
			"Without it such an APIService is left alone and reported.")
	fs.BoolVar(&o.Register, "register-apiservice", o.Register,
		"With --serving-cert-secret: when "+apiservice.Name+" is not registered, create it, routed to --serving-cert-apiservice-service with the Secret's CA "+
			"and owned by --installation-clusterrole (so that it goes with the install). Another adapter's is never touched without --delegate-existing-owner.")
	fs.StringVar(&o.InstallationClusterRole, "installation-clusterrole", o.InstallationClusterRole,
		"The adapter's ClusterRole: its UID names the install, in the mark an uninstall leaves on a given-back APIService (no adapter of that install takes it again) "+
			"and as the owner of an APIService the adapter registers.")
}

// Validate returns every problem with the flags.
func (o *ServingCertOptions) Validate() []error {
	if o.Secret == "" {
		if o.DelegateOwner || o.Register {
			return []error{errors.New("--delegate-existing-owner and --register-apiservice need --serving-cert-secret (the caBundle they route the APIService with)")}
		}
		return nil
	}
	var errs []error
	if _, _, err := splitRef("--serving-cert-secret", o.Secret); err != nil {
		errs = append(errs, err)
	}
	if o.APIServiceService != "" {
		if _, _, err := splitRef("--serving-cert-apiservice-service", o.APIServiceService); err != nil {
			errs = append(errs, err)
		}
	} else if len(o.DNSNames) == 0 {
		errs = append(errs, errors.New("--serving-cert-dns-names is required without --serving-cert-apiservice-service"))
	}
	if (o.DelegateOwner || o.Register) && o.APIServiceService == "" {
		errs = append(errs, errors.New("--delegate-existing-owner and --register-apiservice need --serving-cert-apiservice-service"))
	}
	if (o.DelegateOwner || o.Register) && o.InstallationClusterRole == "" {
		errs = append(errs, errors.New("--delegate-existing-owner and --register-apiservice need --installation-clusterrole"))
	}
	if o.Validity <= 0 || o.CAValidity <= 0 || o.Validity > o.CAValidity {
		errs = append(errs, fmt.Errorf("--serving-cert-validity (%s) and --serving-cert-ca-validity (%s) must be positive, the first at most the second", o.Validity, o.CAValidity))
	}
	if o.PropagationDelay < 0 {
		errs = append(errs, fmt.Errorf("--serving-cert-propagation-delay must not be negative, got %s", o.PropagationDelay))
	}
	return errs
}

func splitRef(flag, ref string) (string, string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%s must be NAMESPACE/NAME, got %q", flag, ref)
	}
	return ns, name, nil
}

// manager builds the serving-certificate Manager (nil without --serving-cert-secret).
func (o *ServingCertOptions) manager(cs kubernetes.Interface, ac aggregator.Interface, m *servingcert.Metrics) (*servingcert.Manager, error) {
	if o.Secret == "" {
		return nil, nil
	}
	ns, name, err := splitRef("--serving-cert-secret", o.Secret)
	if err != nil {
		return nil, err
	}
	mo := servingcert.Options{
		Namespace: ns, SecretName: name, DNSNames: o.DNSNames,
		CAValidity: o.CAValidity, CertValidity: o.Validity, PropagationDelay: o.PropagationDelay,
	}
	if o.APIServiceService != "" {
		sns, sname, err := splitRef("--serving-cert-apiservice-service", o.APIServiceService)
		if err != nil {
			return nil, err
		}
		mo.APIService, mo.Service = apiservice.Name, servingcert.Service{Namespace: sns, Name: sname}
		if len(mo.DNSNames) == 0 {
			mo.DNSNames = []string{sname + "." + sns + ".svc"}
		}
		ours := apiservice.Service{Namespace: sns, Name: sname}
		inst := &installation{client: cs, clusterRole: o.InstallationClusterRole}
		mo.OtherOwner = func(ctx context.Context, api *apiregv1.APIService, caBundle []byte) error {
			return o.otherOwner(ctx, ac, ours, api, caBundle, inst)
		}
		mo.Missing = func(ctx context.Context, caBundle []byte) error {
			return o.missing(ctx, ac, ours, caBundle, inst)
		}
	}
	return servingcert.New(cs, ac, mo, m)
}

// otherOwner is what the adapter does at start when the APIService routes to
// another adapter: with --delegate-existing-owner it records that adapter
// as its delegate and routes the APIService to capscale (preflight
// --delegate --ca-bundle-file, in the cluster); without it, it leaves the
// APIService alone and says so.
func (o *ServingCertOptions) otherOwner(ctx context.Context, ac aggregator.Interface, ours apiservice.Service, api *apiregv1.APIService, caBundle []byte, inst *installation) error {
	owner := "kube-apiserver itself"
	if s := api.Spec.Service; s != nil {
		owner = s.Namespace + "/" + s.Name
	}
	if !o.DelegateOwner {
		klog.FromContext(ctx).Info("Warning: the external-metrics APIService belongs to another adapter: capscale's metrics are not served through it; "+
			"nothing is taken over (install with apiService.delegate=true, or run `metrics-adapter preflight --delegate`, to share it)",
			"apiservice", apiservice.Name, "owner", owner)
		return nil
	}
	// An APIService given back by this install's uninstall (marked with its
	// identity) is not taken over again, whenever this adapter started.
	ref, err := inst.ref(ctx)
	if err != nil {
		return err
	}
	p, err := apiservice.Apply(ctx, ac.ApiregistrationV1(), false, func(api *apiregv1.APIService) (apiservice.Plan, error) {
		return apiservice.PlanDelegate(api, apiservice.DelegateOptions{Ours: ours, TakeOverCA: caBundle, Installation: string(ref.UID)})
	})
	if err != nil {
		return fmt.Errorf("taking %s over from %s in delegation mode: %w", apiservice.Name, owner, err)
	}
	if p.Update == nil {
		klog.FromContext(ctx).Info("Left the external-metrics APIService to its owner", "owner", owner, "result", p.Message)
		return nil
	}
	klog.FromContext(ctx).Info("Took the external-metrics APIService over in delegation mode", "owner", owner, "result", p.Message)
	return nil
}

// missing is what the adapter does when the APIService is not registered:
// with --register-apiservice it creates it, routed to capscale and owned by
// the install's ClusterRole; without it, nothing (apiService.create=false, or
// an install that applies the APIService itself).
func (o *ServingCertOptions) missing(ctx context.Context, ac aggregator.Interface, ours apiservice.Service, caBundle []byte, inst *installation) error {
	if !o.Register {
		return nil
	}
	ref, err := inst.ref(ctx)
	if err != nil {
		return err
	}
	_, err = ac.ApiregistrationV1().APIServices().Create(ctx, apiservice.Registration(ours, caBundle, ref), metav1.CreateOptions{FieldManager: names.FieldManager})
	if apierrors.IsAlreadyExists(err) {
		// Someone registered it meanwhile: the watch brings it, and with it
		// the decision about its owner.
		return nil
	}
	if err != nil {
		return fmt.Errorf("registering APIService %s, routed to %s: %w", apiservice.Name, ours, err)
	}
	klog.FromContext(ctx).Info("Registered the external-metrics APIService: none was registered", "apiservice", apiservice.Name, "service", ours.String(), "owner", klog.KRef("", ref.Name))
	return nil
}
