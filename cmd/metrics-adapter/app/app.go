package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	cmmetrics "sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver/metrics"

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
		RunE: func(cmd *cobra.Command, _ []string) error {
			if errs := o.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
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
	cs, err := kube.Clientset(restCfg)
	if err != nil {
		return err
	}
	factory := kube.InformerFactory(cs)

	clk := clock.RealClock{}
	sources := source.NewManager(ctx, clk, source.NewMetrics())
	defer sources.Stop()
	prov, err := provider.New(provider.Options{Informers: factory, Sources: sources, Clock: clk})
	if err != nil {
		return err
	}
	cfgMetrics := config.NewMetrics()
	var watcher *config.Watcher
	if o.ConfigFile != "" {
		watcher, err = config.NewWatcher(o.ConfigFile, o.ConfigCheckInterval, clk, cfgMetrics, func(c *config.Config) error {
			// Sources first: a new policy may name a new source.
			if err := sources.Apply(c.Sources); err != nil {
				return err
			}
			prov.SetStepPolicies(c.StepPolicies)
			return nil
		})
		if err != nil {
			return err
		}
	} else {
		logger.Info("No --config given: no load-index sources or step policies, only the QPS metrics are served")
	}

	// The adapter's /metrics serves the legacy registry.
	reg := legacyregistry.Registerer()
	for _, r := range []interface {
		Register(prometheus.Registerer) error
	}{sources, cfgMetrics, prov} {
		if err := r.Register(reg); err != nil {
			return err
		}
	}
	if err := cmmetrics.RegisterMetrics(legacyregistry.Register); err != nil {
		return fmt.Errorf("registering custom-metrics-apiserver metrics: %w", err)
	}

	o.WithExternalMetrics(prov)
	server, err := o.Server()
	if err != nil {
		return fmt.Errorf("building the API server: %w", err)
	}
	// Serving before the caches are filled would answer NotFound for
	// workloads that exist.
	if err := server.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("capscale-informers-synced", func(*http.Request) error {
		if !prov.HasSynced() {
			return errors.New("deployment, statefulset, pod and HPA informers have not synced yet")
		}
		return nil
	})); err != nil {
		return fmt.Errorf("adding readyz check: %w", err)
	}

	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if watcher != nil {
		go watcher.Run(ctx)
	}

	logger.Info("Starting capscale metrics adapter", "config", o.ConfigFile, "sources", sources.Names())
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}
