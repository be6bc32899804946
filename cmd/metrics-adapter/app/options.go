// Package app wires the metrics adapter: flags, the custom-metrics-apiserver
// AdapterBase, informers, source pollers, the config watcher and readiness.
package app

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"
	cmoptions "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd/options"
)

// Options are the adapter's command-line options: the AdapterBase's
// (serving, delegated authn/authz, --lister-kubeconfig, ...) and capscale's.
type Options struct {
	basecmd.AdapterBase

	// ConfigFile is the YAML file of sources and step policies.
	ConfigFile string
	// ConfigCheckInterval is how often the file is checked for changes.
	ConfigCheckInterval time.Duration
}

// NewOptions returns Options with defaults.
func NewOptions() *Options {
	o := &Options{ConfigCheckInterval: 5 * time.Second}
	o.Name = "capscale-metrics-adapter"
	o.CustomMetricsAdapterServerOptions = cmoptions.NewCustomMetricsAdapterServerOptions()
	// Self-signed serving certificates (when no --tls-cert-file is given)
	// go to a writable place even on a read-only root filesystem.
	o.SecureServing.ServerCert.CertDirectory = filepath.Join(os.TempDir(), "capscale-metrics-adapter")
	o.SecureServing.ServerCert.PairName = "apiserver"
	return o
}

// AddFlags installs every flag on fs, which the AdapterBase then owns.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.FlagSet = fs
	o.InstallFlags()
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile,
		"YAML file with the load-index sources and load-step policies. Reloaded when it changes; an invalid new file keeps the old configuration. "+
			"Without it only the QPS metrics (annotations on workloads) are served.")
	fs.DurationVar(&o.ConfigCheckInterval, "config-check-interval", o.ConfigCheckInterval,
		"How often --config is checked for changes.")
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	var errs []error
	if o.ConfigCheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("--config-check-interval must be positive, got %s", o.ConfigCheckInterval))
	}
	errs = append(errs, o.CustomMetricsAdapterServerOptions.Validate()...)
	return errs
}
