package app

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/capscale/capscale/internal/command"
	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/metricsadapter/config"
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
	}
	cmd.SetContext(ctx)
	command.Wire(ctx, cmd, o.Logs, o.Flags(), o.Validate, o.Config)
	cmd.AddCommand(newPreflightCommand())
	return cmd
}

// adapter is everything Config wires apart from the API server, so that it can
// be tested with a fake clientset.
type adapter struct {
	client     kubernetes.Interface
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
		client:     cs,
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
