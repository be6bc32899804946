// Package app is the metrics-adapter command: Options (flags, validation) →
// Config (clients, the custom-metrics-apiserver server, informers, source
// pollers, the config watcher, readiness) → Run.
package app

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"
	cmoptions "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd/options"

	"github.com/capscale/capscale/metricsadapter/delegate"
)

// Options are the adapter's command-line options: the AdapterBase's
// (serving, delegated authn/authz, --lister-kubeconfig, ...) and capscale's.
type Options struct {
	basecmd.AdapterBase

	// ConfigFile is the YAML file of sources and step policies.
	ConfigFile string
	// ConfigCheckInterval is how often the file is checked for changes.
	ConfigCheckInterval time.Duration

	// Delegate* configure forwarding to the APIService's previous owner
	// (README "Installing next to KEDA or prometheus-adapter").
	DelegateRouting           string
	DelegateTimeout           time.Duration
	DelegateMaxResponseBytes  int64
	DelegateDiscoveryInterval time.Duration

	Logs *logsapi.LoggingConfiguration
}

// NewOptions returns Options with defaults.
func NewOptions() *Options {
	o := &Options{
		ConfigCheckInterval:       5 * time.Second,
		DelegateRouting:           string(delegate.RoutingEndpoints),
		DelegateTimeout:           5 * time.Second,
		DelegateMaxResponseBytes:  4 << 20,
		DelegateDiscoveryInterval: 30 * time.Second,
		Logs:                      logsapi.NewLoggingConfiguration(),
	}
	o.Name = "capscale-metrics-adapter"
	o.CustomMetricsAdapterServerOptions = cmoptions.NewCustomMetricsAdapterServerOptions()
	// Self-signed serving certificates (when no --tls-cert-file is given)
	// go to a writable place even on a read-only root filesystem.
	o.SecureServing.ServerCert.CertDirectory = filepath.Join(os.TempDir(), "capscale-metrics-adapter")
	o.SecureServing.ServerCert.PairName = "apiserver"
	return o
}

// Flags returns the options as named flag sets. The AdapterBase owns the
// "apiserver" set and installs its flags only once, so call Flags once per
// Options.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets

	// Serving, delegated authentication and authorization, audit,
	// --lister-kubeconfig, --client-qps, ...
	o.FlagSet = fss.FlagSet("apiserver")
	o.InstallFlags()

	fs := fss.FlagSet("configuration")
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile,
		"YAML file with the load-index sources and load-step policies. Reloaded when it changes; an invalid new file keeps the old configuration. "+
			"Without it only the QPS metrics (annotations on workloads) are served.")
	fs.DurationVar(&o.ConfigCheckInterval, "config-check-interval", o.ConfigCheckInterval,
		"How often --config is checked for changes.")

	fs = fss.FlagSet("delegation")
	fs.StringVar(&o.DelegateRouting, "delegate-routing", o.DelegateRouting,
		"How the delegate's Service is dialled: 'endpoints' (its ready endpoints, like kube-apiserver's --enable-aggregator-routing) or 'service' (<name>.<namespace>.svc through cluster DNS).")
	fs.DurationVar(&o.DelegateTimeout, "delegate-timeout", o.DelegateTimeout,
		"Longest wait for the delegate's answer to one forwarded request; past it the metric is a 503.")
	fs.Int64Var(&o.DelegateMaxResponseBytes, "delegate-max-response-bytes", o.DelegateMaxResponseBytes,
		"Largest answer accepted from the delegate; a larger one is a 503.")
	fs.DurationVar(&o.DelegateDiscoveryInterval, "delegate-discovery-interval", o.DelegateDiscoveryInterval,
		"How often the delegate's metric names are listed for discovery.")

	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	var errs []error
	if o.ConfigCheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("--config-check-interval must be positive, got %s", o.ConfigCheckInterval))
	}
	if r := delegate.Routing(o.DelegateRouting); r != delegate.RoutingEndpoints && r != delegate.RoutingService {
		errs = append(errs, fmt.Errorf("--delegate-routing must be %q or %q, got %q", delegate.RoutingEndpoints, delegate.RoutingService, o.DelegateRouting))
	}
	if o.DelegateTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--delegate-timeout must be positive, got %s", o.DelegateTimeout))
	}
	if o.DelegateMaxResponseBytes <= 0 {
		errs = append(errs, fmt.Errorf("--delegate-max-response-bytes must be positive, got %d", o.DelegateMaxResponseBytes))
	}
	if o.DelegateDiscoveryInterval <= 0 {
		errs = append(errs, fmt.Errorf("--delegate-discovery-interval must be positive, got %s", o.DelegateDiscoveryInterval))
	}
	errs = append(errs, o.CustomMetricsAdapterServerOptions.Validate()...)
	if err := logsapi.Validate(o.Logs, nil, nil); len(err) > 0 {
		errs = append(errs, err.ToAggregate().Errors()...)
	}
	return errs
}
