package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/clock"
	cmapiserver "sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver"
	cmmetrics "sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver/metrics"

	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/servingcert"
	"github.com/capscale/capscale/internal/version"
	"github.com/capscale/capscale/metricsadapter/delegate"
	"github.com/capscale/capscale/metricsadapter/kedascaler"
)

// Config is everything Run needs, built from Options.
type Config struct {
	Options *Options
	// Server is the external.metrics.k8s.io API server.
	Server *cmapiserver.CustomMetricsAdapterServer

	// Scaler serves KEDA's external-scaler protocol; nil when
	// --keda-scaler-bind-address is empty.
	Scaler *kedascaler.Server

	// certs makes and rotates the serving certificate; nil without
	// --serving-cert-secret.
	certs *servingcert.Manager

	adapter  *adapter
	delegate *delegate.Watcher
}

// Config builds the clients, the provider (loading --config, which starts
// the source pollers: Run must follow, and stops them), the delegate
// watcher and the API server with its readiness checks.
//
// It shadows the AdapterBase's Config, which Options.Server still calls.
func (o *Options) Config() (*Config, error) {
	// ClientConfig reads --lister-kubeconfig, or the in-cluster config when
	// it is empty.
	base, err := o.ClientConfig()
	if err != nil {
		return nil, err
	}
	restCfg := rest.CopyConfig(base)
	restCfg.UserAgent = "capscale-metrics-adapter"
	// The informers' watches decide readiness too: see kube.WatchHealth.
	health := kube.NewWatchHealth()
	restCfg.Wrap(health.Wrap)
	cs, err := kube.Clientset(restCfg)
	if err != nil {
		return nil, err
	}

	// The pollers live until Run stops them (adapter.stop).
	a, err := newAdapter(context.Background(), cs, clock.RealClock{}, o.ConfigFile, o.ConfigCheckInterval)
	if err != nil {
		return nil, err
	}
	c, err := o.config(a, health, base, restCfg)
	if err != nil {
		a.stop()
		return nil, err
	}
	return c, nil
}

func (o *Options) config(a *adapter, health *kube.WatchHealth, base, restCfg *rest.Config) (*Config, error) {
	// The adapter's /metrics serves the legacy registry.
	if err := a.register(legacyregistry.Registerer()); err != nil {
		return nil, err
	}
	if err := cmmetrics.RegisterMetrics(legacyregistry.Register); err != nil {
		return nil, fmt.Errorf("registering custom-metrics-apiserver metrics: %w", err)
	}

	// Every metric not named capscale-* goes to the delegate recorded on
	// the APIService, if any.
	ac, err := aggregator.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	dm := delegate.NewMetrics()
	if err := dm.Register(legacyregistry.Registerer()); err != nil {
		return nil, err
	}
	dp := delegate.NewProvider(a.provider)
	dw := delegate.NewWatcher(delegate.WatcherOptions{
		Provider: dp, Kube: a.client, Aggregator: ac, Credentials: base,
		Routing: delegate.Routing(o.DelegateRouting), Timeout: o.DelegateTimeout,
		MaxBytes: o.DelegateMaxResponseBytes, Discovery: o.DelegateDiscoveryInterval, Metrics: dm,
	})
	o.WithExternalMetrics(dp)
	// The config Server builds from (the AdapterBase caches it): the
	// shutdown delay goes in before, and its request-header CA, which
	// verifies the aggregator, is read after.
	built, err := o.AdapterBase.Config()
	if err != nil {
		return nil, fmt.Errorf("building the API server's config: %w", err)
	}
	built.GenericConfig.ShutdownDelayDuration = o.ShutdownDelay
	server, err := o.Server()
	if err != nil {
		return nil, fmt.Errorf("building the API server: %w", err)
	}
	var requestHeaderCA dynamiccertificates.CAContentProvider
	if h := built.GenericConfig.Authentication.RequestHeaderConfig; h != nil {
		requestHeaderCA = h.CAContentProvider
	}
	if err := server.GenericAPIServer.AddReadyzChecks(clientCACheck(server.GenericAPIServer.SecureServingInfo.ClientCA, requestHeaderCA)); err != nil {
		return nil, fmt.Errorf("adding readyz check: %w", err)
	}
	if err := server.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("capscale-informers-synced", a.readyCheck)); err != nil {
		return nil, fmt.Errorf("adding readyz check: %w", err)
	}
	if err := server.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("capscale-informers-connected", func(*http.Request) error {
		return health.Check()
	})); err != nil {
		return nil, fmt.Errorf("adding readyz check: %w", err)
	}
	if err := server.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("capscale-delegate-record-read", func(*http.Request) error {
		if !dw.HasSynced() {
			return errors.New("the APIService's delegate record has not been read yet")
		}
		return nil
	})); err != nil {
		return nil, fmt.Errorf("adding readyz check: %w", err)
	}
	c := &Config{Options: o, Server: server, adapter: a, delegate: dw}
	sm := servingcert.NewMetrics()
	if err := sm.Register(legacyregistry.Registerer()); err != nil {
		return nil, err
	}
	if c.certs, err = o.ServingCert.manager(a.client, ac, sm); err != nil {
		return nil, err
	}
	if c.certs != nil {
		// The generic server asks this provider for the certificate on every
		// handshake: what the Secret holds once its CA is trusted.
		server.GenericAPIServer.SecureServingInfo.Cert = c.certs.Serving()
	}

	// KEDA's external scaler reads capscale's own provider, the one the
	// external-metrics API answers capscale-* names with.
	if o.KEDAScalerBindAddress != "" {
		km := kedascaler.NewMetrics()
		if err := km.Register(legacyregistry.Registerer()); err != nil {
			return nil, err
		}
		cert, key := o.kedaScalerCertKey()
		ko := kedascaler.Options{
			BindAddress: o.KEDAScalerBindAddress, CertFile: cert, KeyFile: key, ClientCAFile: o.KEDAScalerClientCAFile,
			StreamInterval: o.KEDAScalerStreamInterval, MaxStreams: o.KEDAScalerMaxStreams, Ready: a.provider.HasSynced,
		}
		if c.certs != nil && o.KEDAScalerCertFile == "" {
			ko.Serving = c.certs.Serving()
		}
		c.Scaler, err = kedascaler.New(a.provider, ko, km)
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Run starts the informers, the config watcher and the delegate watcher,
// then serves (and the KEDA scaler, if on) until ctx is done. A scaler that
// cannot serve stops the process.
func (c *Config) Run(ctx context.Context) error {
	defer c.adapter.stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.adapter.start(ctx)
	go c.delegate.Run(ctx)
	if c.certs != nil {
		go c.certs.Run(ctx)
		// Nothing to serve before the Secret holds a certificate.
		klog.FromContext(ctx).Info("Waiting for the serving certificate", "secret", c.Options.ServingCert.Secret)
		if err := c.certs.Serving().Wait(ctx); err != nil {
			return err
		}
	}

	scalerErr := make(chan error, 1)
	if c.Scaler != nil {
		go func() {
			err := c.Scaler.Run(ctx)
			if err != nil {
				cancel()
			}
			scalerErr <- err
		}()
	} else {
		scalerErr <- nil
	}

	klog.FromContext(ctx).Info("Starting capscale metrics adapter", "version", version.Version,
		"config", c.Options.ConfigFile, "sources", c.adapter.sources.Names(), "kedaScaler", c.Options.KEDAScalerBindAddress)
	err := c.Server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
	cancel()
	if serr := <-scalerErr; serr != nil {
		return serr
	}
	return err
}
