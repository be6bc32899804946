// Package app is the metrics-adapter command: Options (flags, validation) →
// Config (clients, the custom-metrics-apiserver server, informers, source
// pollers, the config watcher, readiness) → Run.
package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"
	cmoptions "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd/options"

	"github.com/capscale/capscale/internal/httpserver"
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
	// (docs/keda.md "Installing next to KEDA or prometheus-adapter").
	DelegateRouting           string
	DelegateTimeout           time.Duration
	DelegateMaxResponseBytes  int64
	DelegateDiscoveryInterval time.Duration

	// KEDAScaler* configure KEDA's external-scaler gRPC protocol (docs/keda.md
	// "KEDA keeps the APIService: capscale as an external scaler").
	KEDAScalerBindAddress    string
	KEDAScalerCertFile       string
	KEDAScalerKeyFile        string
	KEDAScalerClientCAFile   string
	KEDAScalerAnyClient      bool
	KEDAScalerStreamInterval time.Duration
	KEDAScalerMaxStreams     int

	// ServingCert makes the adapter its own serving certificate.
	ServingCert ServingCertOptions

	// ShutdownDelay keeps the adapter serving after SIGTERM, /readyz
	// failing, until the endpoints that route to it have dropped it.
	ShutdownDelay time.Duration

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
		KEDAScalerStreamInterval:  5 * time.Second,
		KEDAScalerMaxStreams:      1000,
		ServingCert:               defaultServingCertOptions(),
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

	o.ServingCert.AddFlags(fss.FlagSet("serving certificate"))

	fs = fss.FlagSet("shutdown")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay-duration", o.ShutdownDelay,
		"How long the adapter keeps serving after SIGTERM, with /readyz failing, so that kube-apiserver's aggregator stops routing to it before it stops answering "+
			"(a rolling update otherwise fails the HPA reads sent to the old pod meanwhile). 0 stops at once.")

	fs = fss.FlagSet("keda scaler")
	fs.StringVar(&o.KEDAScalerBindAddress, "keda-scaler-bind-address", o.KEDAScalerBindAddress,
		"host:port to serve KEDA's external-scaler gRPC protocol on (TLS), for ScaledObjects with an 'external' trigger; empty (the default) disables it.")
	fs.StringVar(&o.KEDAScalerCertFile, "keda-scaler-tls-cert-file", o.KEDAScalerCertFile,
		"PEM serving certificate of the KEDA scaler, reloaded when it changes; empty uses --tls-cert-file.")
	fs.StringVar(&o.KEDAScalerKeyFile, "keda-scaler-tls-private-key-file", o.KEDAScalerKeyFile,
		"PEM key of --keda-scaler-tls-cert-file; empty uses --tls-private-key-file.")
	fs.StringVar(&o.KEDAScalerClientCAFile, "keda-scaler-client-ca-file", o.KEDAScalerClientCAFile,
		"PEM CA that KEDA's client certificate must verify against (reloaded when it changes). Required with --keda-scaler-bind-address unless --keda-scaler-allow-any-client.")
	fs.BoolVar(&o.KEDAScalerAnyClient, "keda-scaler-allow-any-client", o.KEDAScalerAnyClient,
		"Serve the KEDA scaler to clients without a verified certificate: anyone who reaches the port can then read capscale's metrics for any namespace. Logged as a warning.")
	fs.DurationVar(&o.KEDAScalerStreamInterval, "keda-scaler-stream-interval", o.KEDAScalerStreamInterval,
		"How often an open StreamIsActive stream re-evaluates its trigger; a change is pushed at the next evaluation.")
	fs.IntVar(&o.KEDAScalerMaxStreams, "keda-scaler-max-streams", o.KEDAScalerMaxStreams,
		"Most StreamIsActive streams open at once; more are refused with ResourceExhausted.")

	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	var errs []error
	if o.ConfigCheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("--config-check-interval must be positive, got %s", o.ConfigCheckInterval))
	}
	if o.ShutdownDelay < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-delay-duration must not be negative, got %s", o.ShutdownDelay))
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
	errs = append(errs, o.ServingCert.Validate()...)
	errs = append(errs, o.validateKEDAScaler()...)
	errs = append(errs, o.CustomMetricsAdapterServerOptions.Validate()...)
	if err := logsapi.Validate(o.Logs, nil, nil); len(err) > 0 {
		errs = append(errs, err.ToAggregate().Errors()...)
	}
	return errs
}

// validateKEDAScaler checks the --keda-scaler-* flags when the scaler is on.
func (o *Options) validateKEDAScaler() []error {
	if o.KEDAScalerBindAddress == "" {
		return nil
	}
	var errs []error
	if err := httpserver.ValidateAddress("--keda-scaler-bind-address", o.KEDAScalerBindAddress); err != nil {
		errs = append(errs, err)
	}
	if (o.KEDAScalerCertFile == "") != (o.KEDAScalerKeyFile == "") {
		errs = append(errs, errors.New("--keda-scaler-tls-cert-file and --keda-scaler-tls-private-key-file go together"))
	} else if cert, key := o.kedaScalerCertKey(); (cert == "" || key == "") && o.ServingCert.Secret == "" {
		errs = append(errs, errors.New("--keda-scaler-bind-address needs a serving certificate: --keda-scaler-tls-cert-file and --keda-scaler-tls-private-key-file, --serving-cert-secret, or the adapter's --tls-cert-file and --tls-private-key-file"))
	}
	switch {
	case o.KEDAScalerClientCAFile == "" && !o.KEDAScalerAnyClient:
		errs = append(errs, errors.New("--keda-scaler-bind-address needs --keda-scaler-client-ca-file (KEDA presents a client certificate) or, deliberately, --keda-scaler-allow-any-client"))
	case o.KEDAScalerClientCAFile != "" && o.KEDAScalerAnyClient:
		errs = append(errs, errors.New("--keda-scaler-client-ca-file and --keda-scaler-allow-any-client exclude each other"))
	}
	if o.KEDAScalerStreamInterval <= 0 {
		errs = append(errs, fmt.Errorf("--keda-scaler-stream-interval must be positive, got %s", o.KEDAScalerStreamInterval))
	}
	if o.KEDAScalerMaxStreams < 1 {
		errs = append(errs, fmt.Errorf("--keda-scaler-max-streams must be at least 1, got %d", o.KEDAScalerMaxStreams))
	}
	return errs
}

// kedaScalerCertKey is the scaler's serving pair: its own flags, else the
// API server's.
func (o *Options) kedaScalerCertKey() (cert, key string) {
	if o.KEDAScalerCertFile != "" {
		return o.KEDAScalerCertFile, o.KEDAScalerKeyFile
	}
	ck := o.SecureServing.ServerCert.CertKey
	return ck.CertFile, ck.KeyFile
}
