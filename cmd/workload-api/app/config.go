package app

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/capscale/capscale/internal/command"
	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/version"
	"github.com/capscale/capscale/workload"
	"github.com/capscale/capscale/workload/caller"
)

const component = "workload-api"

// NewCommand returns the workload-api command; it runs until ctx ends.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   component,
		Short: "Serve capscale's workload lifecycle API (restart, stop, start, scale, ElasticWebs)",
		Long: `workload-api serves restart, rollout status, stop, start, scale and capacity
for Deployments and StatefulSets (restart also for DaemonSets), and writes
and reads ElasticWeb resources, under /v1/namespaces/{namespace}/... Every
/v1 request needs a bearer token, and acts with it: the API reads the
workload and writes with a client carrying the caller's token, so the
apiserver's RBAC, admission and audit decide. The API's own credentials only
read nodes, pods, deployments and statefulsets for the capacity computation.
GET /openapi.json describes the API.`,
		Args: cobra.NoArgs,
	}
	command.Wire(ctx, cmd, o.Logs, o.Flags(), o.Validate, o.Config)
	return cmd
}

// Config is everything Run needs, built from Options.
type Config struct {
	Options *Options
	// Informers feed the capacity computation; Run starts them.
	Informers informers.SharedInformerFactory
	Server    *workload.Server
}

// Config connects to the apiserver and builds the API server.
func (o *Options) Config() (*Config, error) {
	cfg, err := kube.RESTConfig(o.Kubeconfig, component)
	if err != nil {
		return nil, err
	}
	// The informers' client only: its watches decide readiness too (see
	// kube.WatchHealth); callers' clients are built from cfg unwrapped.
	health := kube.NewWatchHealth()
	informerCfg := rest.CopyConfig(cfg)
	informerCfg.Wrap(health.Wrap)
	cs, err := kube.Clientset(informerCfg)
	if err != nil {
		return nil, err
	}
	// metrics.k8s.io speaks JSON only; the plain config is right for it.
	mc, err := metricsclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating metrics.k8s.io client: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The pod informer sees every pod of the cluster; keep only what the
	// capacity calculator reads.
	factory := kube.InformerFactory(cs, informers.WithTransform(workload.TrimForCache))
	// Writes use the caller's token over the apiserver address and CA of
	// cfg, never cfg's credentials.
	callers, err := caller.New(cfg, o.APIServerQPS, o.APIServerBurst)
	if err != nil {
		return nil, err
	}
	srv := workload.New(workload.Config{
		ClientFor:                 callers.For,
		DynamicFor:                callers.DynamicFor,
		MaxInflight:               o.MaxRequestsInflight,
		Metrics:                   mc,
		Informers:                 factory,
		Registry:                  reg,
		Gatherer:                  reg,
		DefaultUnderlayIPCapacity: o.DefaultUnderlayIPCapacity,
		AwaitCapacitySource:       o.AwaitCapacitySource,
		MaxBodyBytes:              o.MaxBodyBytes,
		Connected:                 health.Check,
	})
	return &Config{Options: o, Informers: factory, Server: srv}, nil
}

// Run starts the informers and serves the API until ctx ends, then shuts
// down gracefully.
func (c *Config) Run(ctx context.Context) error {
	o := c.Options
	klog.InfoS("Starting capscale workload API", "version", version.Version)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.Informers.Start(ctx.Done())
	defer c.Informers.Shutdown()
	go func() {
		start := time.Now()
		for t, ok := range c.Informers.WaitForCacheSync(ctx.Done()) {
			if !ok {
				klog.InfoS("Informer did not sync before shutdown", "type", t.String())
				return
			}
		}
		klog.InfoS("Informers synced; ready", "duration", time.Since(start))
	}()

	tls := o.TLSCertFile != ""
	if !tls && !isLoopback(o.BindAddress) {
		klog.InfoS("Warning: serving plain HTTP on a non-loopback address exposes callers' bearer tokens; set --tls-cert-file and --tls-private-key-file", "bindAddress", o.BindAddress)
	}
	return httpserver.Serve(ctx, httpserver.Options{
		Addr:            o.BindAddress,
		CertFile:        o.TLSCertFile,
		KeyFile:         o.TLSPrivateKeyFile,
		ShutdownTimeout: o.ShutdownTimeout,
	}, c.Server.Handler(), nil)
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
