// Package app is the capscale-controller command: flags, validation and wiring.
package app

import (
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/internal/httpserver"
)

// Options are the command-line options of capscale-controller.
type Options struct {
	Kubeconfig   string
	KubeAPIQPS   float32
	KubeAPIBurst int
	BindAddress  string
	Workers      int

	LeaderElect    bool
	LeaseNamespace string
	LeaseName      string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration

	MaxRetryDelay   time.Duration
	ShutdownTimeout time.Duration

	// CapacitySources is the --capacity-sources file; empty runs no
	// capacity-source mirror.
	CapacitySources string
	// SourceQPS and SourceBurst bound the mirror's Node writes, apart from
	// KubeAPIQPS: a fresh install writes every Node once.
	SourceQPS   float32
	SourceBurst int
	// SourceWorkers patch Nodes in parallel: with 2, a loaded apiserver's
	// ~20 ms a patch held a fresh install of 5000 Nodes at ~120 writes a
	// second, under SourceQPS (issue 55 §6).
	SourceWorkers int
	// sources are CapacitySources compiled by Validate.
	sources []*capacitysource.Compiled

	Logs *logsapi.LoggingConfiguration
}

// NewOptions returns the defaults (kube-controller-manager's lease timings).
func NewOptions() *Options {
	return &Options{
		KubeAPIQPS:      20,
		KubeAPIBurst:    40,
		SourceQPS:       200,
		SourceBurst:     400,
		SourceWorkers:   16,
		BindAddress:     ":8080",
		Workers:         2,
		LeaderElect:     true,
		LeaseNamespace:  "capscale-system",
		LeaseName:       "capscale-controller",
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		MaxRetryDelay:   time.Minute,
		ShutdownTimeout: 10 * time.Second,
		Logs:            logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns the options as named flag sets.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets

	fs := fss.FlagSet("kubernetes")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file; empty means the in-cluster configuration.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Steady requests per second to the apiserver.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of requests to the apiserver.")

	fs = fss.FlagSet("controllers")
	fs.IntVar(&o.Workers, "workers", o.Workers, "ElasticWebs reconciled in parallel.")
	fs.DurationVar(&o.MaxRetryDelay, "max-retry-delay", o.MaxRetryDelay, "Longest backoff before a failing ElasticWeb (or one blocked by an object it does not own) is tried again.")
	fs.StringVar(&o.CapacitySources, "capacity-sources", o.CapacitySources, "File of capacity sources: read each node's underlay-IP capacity from the cluster's IPAM objects (CEL over each object) and mirror it onto the Node's capscale.io/underlay-ip-source-capacity annotation (docs/capacity-sources.md). Empty: no mirror. An expression that does not compile stops the start, naming the source.")
	fs.Float32Var(&o.SourceQPS, "capacity-source-qps", o.SourceQPS, "Steady Node writes per second of the capacity-source mirror, apart from --kube-api-qps: a fresh install writes every Node once (5000 Nodes take at least 25 s at 200).")
	fs.IntVar(&o.SourceBurst, "capacity-source-burst", o.SourceBurst, "Burst of the capacity-source mirror's Node writes.")
	fs.IntVar(&o.SourceWorkers, "capacity-source-workers", o.SourceWorkers, "Nodes the capacity-source mirror patches in parallel; enough to keep --capacity-source-qps busy while each patch waits on the apiserver.")

	fs = fss.FlagSet("leader election")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Take a Lease before reconciling, so that only one replica acts. Turn off only when exactly one replica runs.")
	fs.StringVar(&o.LeaseNamespace, "leader-elect-resource-namespace", o.LeaseNamespace, "Namespace of the Lease.")
	fs.StringVar(&o.LeaseName, "leader-elect-resource-name", o.LeaseName, "Name of the Lease.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "How long a standby waits after the last renewal before taking the Lease.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "How long the leader keeps trying to renew before it stops leading.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "How often to try to take or renew the Lease.")

	fs = fss.FlagSet("serving")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "host:port of /healthz, /readyz and /metrics (plain HTTP: they carry no secret); empty disables.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long the HTTP server may finish requests after SIGTERM.")

	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	var errs []error
	if o.BindAddress != "" {
		if err := httpserver.ValidateAddress("--bind-address", o.BindAddress); err != nil {
			errs = append(errs, err)
		}
	}
	if o.Kubeconfig != "" {
		if _, err := os.Stat(o.Kubeconfig); err != nil {
			errs = append(errs, fmt.Errorf("--kubeconfig: %w", err))
		}
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps must be positive and --kube-api-burst at least 1, got %v and %d", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if o.SourceWorkers < 1 || o.SourceWorkers > 256 {
		errs = append(errs, fmt.Errorf("--capacity-source-workers must be in 1..256, got %d", o.SourceWorkers))
	}
	if o.SourceQPS <= 0 || o.SourceBurst < 1 {
		errs = append(errs, fmt.Errorf("--capacity-source-qps must be positive and --capacity-source-burst at least 1, got %v and %d", o.SourceQPS, o.SourceBurst))
	}
	if o.Workers < 1 || o.Workers > 64 {
		errs = append(errs, fmt.Errorf("--workers must be in 1..64, got %d", o.Workers))
	}
	if o.MaxRetryDelay < time.Second {
		errs = append(errs, fmt.Errorf("--max-retry-delay must be at least 1s, got %s", o.MaxRetryDelay))
	}
	if o.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout must be positive, got %s", o.ShutdownTimeout))
	}
	if o.LeaderElect {
		for _, msg := range validation.IsDNS1123Label(o.LeaseNamespace) {
			errs = append(errs, fmt.Errorf("--leader-elect-resource-namespace %q: %s", o.LeaseNamespace, msg))
		}
		for _, msg := range validation.IsDNS1123Subdomain(o.LeaseName) {
			errs = append(errs, fmt.Errorf("--leader-elect-resource-name %q: %s", o.LeaseName, msg))
		}
		// client-go's own rules, checked here so that a bad combination is a
		// flag error rather than a panic in NewLeaderElector.
		switch {
		case o.RetryPeriod <= 0:
			errs = append(errs, fmt.Errorf("--leader-elect-retry-period must be positive, got %s", o.RetryPeriod))
		case o.RenewDeadline <= time.Duration(1.2*float64(o.RetryPeriod)):
			errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%s) must be greater than 1.2 × --leader-elect-retry-period (%s)", o.RenewDeadline, o.RetryPeriod))
		case o.LeaseDuration <= o.RenewDeadline:
			errs = append(errs, fmt.Errorf("--leader-elect-lease-duration (%s) must be greater than --leader-elect-renew-deadline (%s)", o.LeaseDuration, o.RenewDeadline))
		}
	}
	if o.CapacitySources != "" {
		cs, err := capacitysource.Load(o.CapacitySources)
		if err != nil {
			errs = append(errs, fmt.Errorf("--capacity-sources: %w", err))
		}
		o.sources = cs
	}
	if err := logsapi.Validate(o.Logs, nil, nil); len(err) > 0 {
		errs = append(errs, err.ToAggregate().Errors()...)
	}
	return errs
}
