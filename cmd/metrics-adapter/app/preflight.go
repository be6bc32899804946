package app

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/metricsadapter/apiservice"
)

// preflightOptions are the flags of `metrics-adapter preflight`.
type preflightOptions struct {
	kubeconfig     string
	replace        bool
	delegate       bool
	restore        bool
	dryRun         bool
	delegateCAFile string
	caBundleFile   string
	clusterRole    string
	want           apiservice.Service
}

// validate returns the first contradiction between the flags.
func (o *preflightOptions) validate() error {
	modes := 0
	for _, on := range []bool{o.replace, o.delegate, o.restore} {
		if on {
			modes++
		}
	}
	switch {
	case modes > 1:
		return errors.New("--replace, --delegate and --restore exclude each other")
	case !o.delegate && (o.delegateCAFile != "" || o.caBundleFile != ""):
		return errors.New("--delegate-ca-file and --ca-bundle-file go with --delegate")
	case o.dryRun && !o.delegate && !o.restore:
		return errors.New("--dry-run goes with --delegate or --restore, the modes that write")
	}
	return nil
}

func readPEM(flag, file string) ([]byte, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%s: %s is empty", flag, file)
	}
	return b, nil
}

// newPreflightCommand is `metrics-adapter preflight`: run before installing,
// it refuses to take v1beta1.external.metrics.k8s.io from another adapter
// unless --replace (take over, drop the other) or --delegate (take over,
// forward the other's metrics to it) is given; --restore gives the
// APIService back to the recorded delegate when uninstalling.
func newPreflightCommand() *cobra.Command {
	o := &preflightOptions{want: apiservice.Service{Namespace: "capscale-system", Name: "capscale-metrics-adapter"}}
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check, record or restore the owner of the external-metrics APIService",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			delegateCA, err := readPEM("--delegate-ca-file", o.delegateCAFile)
			if err != nil {
				return err
			}
			takeOverCA, err := readPEM("--ca-bundle-file", o.caBundleFile)
			if err != nil {
				return err
			}
			cfg, err := kube.RESTConfig(o.kubeconfig, "metrics-adapter-preflight")
			if err != nil {
				return err
			}
			c, err := aggregator.NewForConfig(cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			suffix := ""
			if o.dryRun {
				suffix = " (server dry run: nothing changed)"
			}
			switch {
			case o.delegate:
				p, err := apiservice.Apply(cmd.Context(), c.ApiregistrationV1(), o.dryRun, func(api *apiregv1.APIService) (apiservice.Plan, error) {
					return apiservice.PlanDelegate(api, apiservice.DelegateOptions{Ours: o.want, DelegateCA: delegateCA, TakeOverCA: takeOverCA})
				})
				if err != nil {
					return err
				}
				fmt.Fprintln(out, p.Message+suffix)
				return nil
			case o.restore:
				cs, err := kubernetes.NewForConfig(cfg)
				if err != nil {
					return err
				}
				// The install being removed marks what it gave back, so
				// that none of its adapters takes it again.
				id, err := (&installation{client: cs, clusterRole: o.clusterRole}).id(cmd.Context())
				if err != nil {
					return err
				}
				p, err := apiservice.Apply(cmd.Context(), c.ApiregistrationV1(), o.dryRun, func(api *apiregv1.APIService) (apiservice.Plan, error) {
					return apiservice.PlanRestore(api, o.want, id)
				})
				if err != nil {
					return err
				}
				fmt.Fprintln(out, p.Message+suffix)
				return nil
			}
			decision, current, err := apiservice.Check(cmd.Context(), c.ApiregistrationV1(), o.want, o.replace)
			if err != nil {
				return err
			}
			switch decision {
			case apiservice.Absent:
				fmt.Fprintf(out, "ok: %s is not registered; capscale may install it\n", apiservice.Name)
			case apiservice.Ours:
				fmt.Fprintf(out, "ok: %s already routes to %s\n", apiservice.Name, current)
			case apiservice.Replace:
				fmt.Fprintf(out, "warning: %s is served by %s; --replace given, capscale will take it over\n", apiservice.Name, current)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig file; empty uses the in-cluster config.")
	f.BoolVar(&o.replace, "replace", false, "Take the APIService over even if another adapter serves it; that adapter's metrics stop being served.")
	f.BoolVar(&o.delegate, "delegate", false, "Record the APIService's current owner as capscale's delegate (on the APIService), so that capscale forwards every metric not named capscale-* to it. Idempotent; capscale itself is never recorded.")
	f.StringVar(&o.delegateCAFile, "delegate-ca-file", "", "With --delegate: PEM CA that verifies the current owner, needed when its APIService has no caBundle (insecureSkipTLSVerify).")
	f.StringVar(&o.caBundleFile, "ca-bundle-file", "", "With --delegate: also route the APIService to capscale's Service with this PEM CA as caBundle, in the same write (for Helm with apiService.create=false).")
	f.BoolVar(&o.restore, "restore", false, "Give the APIService back to the recorded delegate, exactly as it was registered, and remove the record.")
	f.StringVar(&o.clusterRole, "installation-clusterrole", DefaultInstallationClusterRole,
		"With --restore: the adapter's ClusterRole, whose UID names the install; the given-back APIService is marked with it so that no adapter of that install takes it again.")
	f.BoolVar(&o.dryRun, "dry-run", false, "With --delegate or --restore: send the write as a server dry run.")
	f.StringVar(&o.want.Namespace, "namespace", o.want.Namespace, "Namespace of capscale's adapter Service.")
	f.StringVar(&o.want.Name, "service", o.want.Name, "Name of capscale's adapter Service.")
	return cmd
}
