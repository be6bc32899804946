package app

import (
	"fmt"

	"github.com/spf13/cobra"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/metricsadapter/apiservice"
)

// newPreflightCommand is `metrics-adapter preflight`: run before installing,
// it refuses to take v1beta1.external.metrics.k8s.io from another adapter
// unless --replace is given.
func newPreflightCommand() *cobra.Command {
	var (
		kubeconfig string
		replace    bool
		want       = apiservice.Service{Namespace: "capscale-system", Name: "capscale-metrics-adapter"}
	)
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check that installing capscale will not take the external-metrics APIService from another adapter",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := kube.RESTConfig(kubeconfig, "metrics-adapter-preflight")
			if err != nil {
				return err
			}
			c, err := aggregator.NewForConfig(cfg)
			if err != nil {
				return err
			}
			decision, current, err := apiservice.Check(cmd.Context(), c.ApiregistrationV1(), want, replace)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
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
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig file; empty uses the in-cluster config.")
	cmd.Flags().BoolVar(&replace, "replace", false, "Take the APIService over even if another adapter serves it.")
	cmd.Flags().StringVar(&want.Namespace, "namespace", want.Namespace, "Namespace of capscale's adapter Service.")
	cmd.Flags().StringVar(&want.Name, "service", want.Name, "Name of capscale's adapter Service.")
	return cmd
}
