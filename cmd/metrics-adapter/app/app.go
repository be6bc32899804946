package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/clock"
	cmmetrics "sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver/metrics"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/version"
	"github.com/capscale/capscale/metricsadapter/config"
	"github.com/capscale/capscale/metricsadapter/delegate"
	"github.com/capscale/capscale/metricsadapter/provider"
	"github.com/capscale/capscale/metricsadapter/source"
)

// NewCommand returns the metrics-adapter command; it runs until ctx is done.
func NewCommand(ctx context.Context) *cobra.Command {
	return newCommand(ctx, NewOptions())
}

func newCommand(ctx context.Context, o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "metrics-adapter",
		Short: "Serve capscale's load-index and replica-count metrics on external.metrics.k8s.io",
		Long: `metrics-adapter is an aggregated API server for external.metrics.k8s.io/v1beta1.
It serves capscale-load-index (source=NAME), capscale-desired-replicas
(workload=NAME,policy=qps|load-step), capscale-total-qps and capscale-real-qps
(workload=NAME) from memory, for ordinary HorizontalPodAutoscalers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if errs := o.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	cmd.AddCommand(newPreflightCommand())
	return cmd
}

// Run starts the informers, the source pollers and the config watcher, then
// serves until ctx is done.
func (o *Options) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)

	// ClientConfig reads --lister-kubeconfig, or the in-cluster config when
	// it is empty.
	base, err := o.ClientConfig()
	if err != nil {
		return err
	}
	restCfg := rest.CopyConfig(base)
	restCfg.UserAgent = "capscale-metrics-adapter"
	// The informers' watches decide readiness too: see kube.WatchHealth.
	health := kube.NewWatchHealth()
	restCfg.Wrap(health.Wrap)
	cs, err := kube.Clientset(restCfg)
	if err != nil {
		return err
	}

	a, err := newAdapter(ctx, cs, clock.RealClock{}, o.ConfigFile, o.ConfigCheckInterval)
	if err != nil {
		return err
	}
	defer a.stop()
	// The adapter's /metrics serves the legacy registry.
	if err := a.register(legacyregistry.Registerer()); err != nil {
		return err
	}
	if err := cmmetrics.RegisterMetrics(legacyregistry.Register); err != nil {
		return fmt.Errorf("registering custom-metrics-apiserver metrics: %w", err)
	}

	// Every metric not named capscale-* goes to the delegate recorded on
	// the APIService, if any.
	ac, err := aggregator.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	dm := delegate.NewMetrics()
	if err := dm.Register(legacyregistry.Registerer()); err != nil {
		return err
	}
	dp := delegate.NewProvider(a.provider)
	dw := delegate.NewWatcher(delegate.WatcherOptions{
		Provider: dp, Kube: cs, Aggregator: ac, Credentials: base,
		Routing: delegate.Routing(o.DelegateRouting), Timeout: o.DelegateTimeout,
		MaxBytes: o.DelegateMaxResponseBytes, Discovery: o.DelegateDiscoveryInterval, Metrics: dm,
	})
	o.WithExternalMetrics(dp)
	server, err := o.Server()
	if err != nil {
		return fmt.Errorf("building the API server: %w", err)
	}
	if err := server.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("capscale-informers-synced", a.readyCheck)); err != nil {
		return fmt.Errorf("adding readyz check: %w", err)
	}
	if err := server.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("capscale-informers-connected", func(*http.Request) error {
		return health.Check()
	})); err != nil {
		return fmt.Errorf("adding readyz check: %w", err)
	}
	if err := server.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("capscale-delegate-record-read", func(*http.Request) error {
		if !dw.HasSynced() {
			return errors.New("the APIService's delegate record has not been read yet")
		}
		return nil
	})); err != nil {
		return fmt.Errorf("adding readyz check: %w", err)
	}
	a.start(ctx)
	go dw.Run(ctx)

	logger.Info("Starting capscale metrics adapter", "version", version.Version, "config", o.ConfigFile, "sources", a.sources.Names())
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

// adapter is everything Run wires apart from the API server, so that it can
// be tested with a fake clientset.
type adapter struct {
	informers  informers.SharedInformerFactory
	sources    *source.Manager
	provider   *provider.Provider
	cfgMetrics *config.Metrics
	// watcher is nil without --config.
	watcher *config.Watcher
}

// newAdapter builds the informers, the source manager and the provider, and
// loads configFile (if any): an invalid file at startup is an error.
func newAdapter(ctx context.Context, cs kubernetes.Interface, clk clock.WithTicker, configFile string, checkInterval time.Duration) (*adapter, error) {
	a := &adapter{
		informers:  kube.InformerFactory(cs),
		sources:    source.NewManager(ctx, clk, source.NewMetrics()),
		cfgMetrics: config.NewMetrics(),
	}
	var err error
	if a.provider, err = provider.New(provider.Options{Informers: a.informers, Sources: a.sources, Clock: clk}); err != nil {
		a.sources.Stop()
		return nil, err
	}
	if configFile == "" {
		klog.FromContext(ctx).Info("No --config given: no load-index sources or step policies, only the QPS metrics are served")
		return a, nil
	}
	a.watcher, err = config.NewWatcher(configFile, checkInterval, clk, a.cfgMetrics, func(c *config.Config) error {
		// Sources first: a new policy may name a new source.
		if err := a.sources.Apply(c.Sources); err != nil {
			return err
		}
		a.provider.SetStepPolicies(c.StepPolicies)
		return nil
	})
	if err != nil {
		a.sources.Stop()
		return nil, err
	}
	return a, nil
}

// register adds every capscale collector to reg.
func (a *adapter) register(reg prometheus.Registerer) error {
	for _, r := range []interface {
		Register(prometheus.Registerer) error
	}{a.sources, a.cfgMetrics, a.provider} {
		if err := r.Register(reg); err != nil {
			return err
		}
	}
	return nil
}

// start runs the informers and the config watcher until ctx is done.
func (a *adapter) start(ctx context.Context) {
	a.informers.Start(ctx.Done())
	if a.watcher != nil {
		go a.watcher.Run(ctx)
	}
}

// stop ends the pollers and waits for the informers.
func (a *adapter) stop() {
	a.sources.Stop()
	a.informers.Shutdown()
}

// readyCheck is the /readyz check: serving before the caches are filled
// would answer NotFound for workloads that exist.
func (a *adapter) readyCheck(*http.Request) error {
	if !a.provider.HasSynced() {
		return errors.New("deployment, statefulset, pod and HPA informers have not synced yet")
	}
	return nil
}
