package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/extender/publisher"
	"github.com/capscale/capscale/internal/command"
	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/version"
)

const component = "extender"

// NewCommand returns the extender command; it runs until ctx ends.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "extender",
		Short: "kube-scheduler extender that never over-commits a node's underlay IPs",
		Long: `extender answers kube-scheduler's filter, bind and preempt calls for pods
that request the capscale.io/underlay-ip extended resource: filter keeps the
nodes with the most free underlay IPs, bind re-checks the node's capacity
and binds. With --publish-capacity it also publishes every node's capacity
in Node status (native mode), and removes the finalizer
capscale.io/underlay-ip-release from pods once their node gave their IPs
back.`,
		Args: cobra.NoArgs,
	}
	command.Wire(ctx, cmd, o.Logs, o.Flags(), o.Validate, o.Config)
	cmd.AddCommand(newReleaseCleanupCommand(ctx), newKubeletPluginCommand(ctx))
	return cmd
}

// Run starts the informers, the requeuer and (if enabled) the capacity
// publisher, and serves until ctx is done.
func (c *Config) Run(ctx context.Context) error {
	if c.MaxProcs > 0 {
		runtime.GOMAXPROCS(c.MaxProcs)
	}
	klog.InfoS("Starting capscale extender", "version", version.Version, "maxProcs", runtime.GOMAXPROCS(0))
	o, cs, factory, ledger, waiting, pub, handler, synced := c.Options, c.Client, c.Factory, c.Ledger, c.Waiting, c.Publisher, c.Handler, c.Synced
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	if c.PendingPods != nil {
		go c.PendingPods.Run(ctx.Done())
	}
	defer func() {
		// Shutdown waits for the informers, which stop only once ctx is
		// done: cancel first, also when Serve failed on its own.
		cancel()
		factory.Shutdown()
	}()
	go c.Tracker.Run(ctx)
	if c.Sources != nil {
		// Every replica reads, so that a new leader publishes at once.
		go c.Sources.Run(ctx, c.nodesSynced)
	}
	go c.BinderLease.Run(ctx)
	// Ends the reservations of bound pods that left while the pod watch was
	// down and that a relist never shows (extender/reconcile.go).
	go extender.NewReconciler(ledger, cs, extender.ReconcilerOptions{Metrics: c.Metrics, Waiting: waiting}).Run(ctx)
	if waiting != nil {
		go extender.NewRequeuer(waiting, ledger, cs, o.RequeueQPS, max(1, int(o.RequeueQPS)), c.Metrics).Run(ctx)
	}
	if c.Devices != nil {
		c.Devices.Start(ctx)
	}
	if pub != nil || c.Devices != nil {
		id := o.LeaderElectIdentity
		if id == "" {
			host, _ := os.Hostname()
			id = host + "_" + string(uuid.NewUUID())
		}
		go func() {
			// The releaser leads with the publisher: one writer of each.
			run := func(ctx context.Context) {
				go c.Releaser.Run(ctx)
				if c.Devices != nil {
					c.Devices.Run(ctx)
					return
				}
				pub.Run(ctx)
			}
			if err := publisher.RunElected(ctx, c.LeaseClient, o.LeaderElectNamespace, id, run); err != nil {
				klog.ErrorS(err, "Capacity publisher stopped")
				cancel()
			}
		}()
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), synced) {
			t := ledger.Report().Totals
			klog.InfoS("Underlay IP ledger rebuilt from informers, ready", "nodes", t.Nodes, "capacity", t.Capacity, "used", t.Used)
		}
	}()

	var probeErr error
	probeDone := make(chan struct{})
	if o.ProbeBindAddress != "" {
		go func() {
			defer close(probeDone)
			// A probe port that cannot serve stops the extender: without it
			// the kubelet would restart it anyway.
			if err := httpserver.Serve(ctx, httpserver.Options{Addr: o.ProbeBindAddress, ShutdownTimeout: o.ShutdownTimeout}, probeOnly(handler), nil); err != nil {
				probeErr = fmt.Errorf("probe server: %w", err)
				cancel()
			}
		}()
	} else {
		close(probeDone)
	}
	var main http.Handler = handler
	if o.Profiling {
		main = withPprof(handler)
	}
	err := httpserver.Serve(ctx, httpserver.Options{
		Addr:            o.BindAddress,
		CertFile:        o.TLSCertFile,
		KeyFile:         o.TLSPrivateKeyFile,
		ShutdownTimeout: o.ShutdownTimeout,
		ConnState:       httpserver.ConnCounter("extender", c.Registry),
	}, main, c.Listening)
	cancel()
	<-probeDone
	if err != nil {
		return fmt.Errorf("extender server: %w", err)
	}
	if probeErr != nil {
		return probeErr
	}
	klog.InfoS("Extender stopped")
	return nil
}

// withPprof adds net/http/pprof's handlers under /debug/pprof/.
func withPprof(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// probeOnly lets through GET /healthz, /readyz and /metrics and nothing else:
// the verbs (above all /bind) must not be reachable off loopback.
func probeOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics":
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				h.ServeHTTP(w, r)
				return
			}
		}
		httpserver.WriteError(w, http.StatusNotFound, "the probe port serves only GET /healthz, /readyz and /metrics")
	})
}
