// Package app is the workload-api command: flags, validation and wiring.
package app

import (
	"fmt"
	"os"
	"time"

	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/underlay"
	"github.com/capscale/capscale/workload"
	"github.com/capscale/capscale/workload/capacity"
)

// Options are the command-line options of workload-api.
type Options struct {
	BindAddress               string
	Kubeconfig                string
	TLSCertFile               string
	TLSPrivateKeyFile         string
	MaxRequestsInflight       int
	APIServerQPS              float32
	APIServerBurst            int
	DefaultUnderlayIPCapacity int64
	// AwaitCapacitySource is the extender's --await-capacity-source.
	AwaitCapacitySource bool
	MaxBodyBytes        int64
	ShutdownTimeout     time.Duration

	Logs *logsapi.LoggingConfiguration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		BindAddress:               ":8443",
		MaxRequestsInflight:       workload.DefaultMaxInflight,
		APIServerQPS:              50,
		APIServerBurst:            100,
		DefaultUnderlayIPCapacity: capacity.DefaultUnderlayIPCapacity,
		MaxBodyBytes:              workload.DefaultMaxBodyBytes,
		ShutdownTimeout:           10 * time.Second,
		Logs:                      logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns the options as named flag sets.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets

	fs := fss.FlagSet("serving")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "host:port to serve on.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "File with the x509 serving certificate. Without it and --tls-private-key-file the API serves plain HTTP, which exposes callers' bearer tokens: use that on loopback only.")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "File with the private key of --tls-cert-file.")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "Largest request body accepted; larger ones get 413.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long in-flight requests may finish after SIGTERM.")

	fs = fss.FlagSet("kubernetes")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file; empty means the in-cluster configuration.")
	fs.IntVar(&o.MaxRequestsInflight, "max-requests-inflight", o.MaxRequestsInflight, "Most /v1 requests served at once; more are answered 429. Each one calls the apiserver with its caller's token.")
	fs.Float32Var(&o.APIServerQPS, "apiserver-qps", o.APIServerQPS, "Calls per second to the apiserver made with callers' tokens, all callers together (a token bucket shared by every request's client).")
	fs.IntVar(&o.APIServerBurst, "apiserver-burst", o.APIServerBurst, "Burst of --apiserver-qps.")
	fs.BoolVar(&o.AwaitCapacitySource, "await-capacity-source", o.AwaitCapacitySource, "Capacity sources are configured: a node the capacity-source mirror has not read yet counts 0 underlay IPs (the extender's --await-capacity-source).")
	fs.Int64Var(&o.DefaultUnderlayIPCapacity, "default-underlay-ip-capacity", o.DefaultUnderlayIPCapacity, "The "+underlay.DefaultCapacityText+" (the extender's --default-capacity).")

	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	var errs []error
	if err := httpserver.ValidateAddress("--bind-address", o.BindAddress); err != nil {
		errs = append(errs, err)
	}
	if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
		errs = append(errs, fmt.Errorf("--tls-cert-file and --tls-private-key-file must be given together"))
	}
	for _, f := range []struct{ flag, path string }{
		{"--tls-cert-file", o.TLSCertFile}, {"--tls-private-key-file", o.TLSPrivateKeyFile}, {"--kubeconfig", o.Kubeconfig},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.flag, err))
		}
	}
	if o.MaxRequestsInflight < 1 {
		errs = append(errs, fmt.Errorf("--max-requests-inflight must be at least 1, got %d", o.MaxRequestsInflight))
	}
	if !(o.APIServerQPS > 0) {
		errs = append(errs, fmt.Errorf("--apiserver-qps must be positive, got %v", o.APIServerQPS))
	}
	if o.APIServerBurst < 1 {
		errs = append(errs, fmt.Errorf("--apiserver-burst must be at least 1, got %d", o.APIServerBurst))
	}
	if o.DefaultUnderlayIPCapacity < 1 {
		errs = append(errs, fmt.Errorf("--default-underlay-ip-capacity must be at least 1, got %d", o.DefaultUnderlayIPCapacity))
	}
	if o.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("--max-body-bytes must be at least 1024, got %d", o.MaxBodyBytes))
	}
	if o.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout must be positive, got %s", o.ShutdownTimeout))
	}
	if err := logsapi.Validate(o.Logs, nil, nil); len(err) > 0 {
		errs = append(errs, err.ToAggregate().Errors()...)
	}
	return errs
}
