package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/controller/elasticweb"
	"github.com/capscale/capscale/internal/command"
	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/version"
)

const component = "controller"

// NewCommand returns the capscale-controller command; it runs until ctx ends.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run capscale's controllers (ElasticWeb), leader-elected",
		Long: `controller (capscale-controller) runs capscale's controllers. The ElasticWeb
controller keeps a Deployment, a Service and a HorizontalPodAutoscaler per
ElasticWeb (capscale.io/v1alpha1) in shape with server-side apply, and writes
what runs into the ElasticWeb's status. Replicas elect one leader with a Lease;
the others stand by.`,
		Args: cobra.NoArgs,
	}
	command.Wire(ctx, cmd, o.Logs, o.Flags(), o.Validate, o.Config)
	return cmd
}

// Config is everything Run needs, built from Options.
type Config struct {
	Options     *Options
	Client      kubernetes.Interface
	Registry    *prometheus.Registry
	Broadcaster record.EventBroadcaster
	Controller  *elasticweb.Controller
	// Capacity is the capacity-source mirror; nil without
	// --capacity-sources.
	Capacity *capacitysource.Controller
	Identity string
	// Watches follows the informers' watches (kube.WatchHealth).
	Watches *kube.WatchHealth

	leading atomic.Bool
}

// Config connects to the apiserver and builds the controller.
func (o *Options) Config() (*Config, error) {
	rc, err := kube.RESTConfig(o.Kubeconfig, component)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	// The informers' watches decide readiness too: see kube.WatchHealth.
	health := kube.NewWatchHealth()
	rc.Wrap(health.Wrap)
	cs, err := kube.Clientset(rc)
	if err != nil {
		return nil, err
	}
	// Custom resources speak JSON only: the plain config is right for them.
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b := record.NewBroadcaster()
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("reading the hostname for the leader identity: %w", err)
	}
	ctrl, err := elasticweb.New(elasticweb.Config{
		Client:        cs,
		Dynamic:       dyn,
		Recorder:      b.NewRecorder(scheme, corev1.EventSource{Component: "capscale-controller"}),
		Metrics:       elasticweb.NewMetrics(reg),
		Workers:       o.Workers,
		MaxRetryDelay: o.MaxRetryDelay,
	})
	if err != nil {
		return nil, err
	}
	c := &Config{
		Options: o, Client: cs, Registry: reg, Broadcaster: b, Controller: ctrl,
		Identity: host + "_" + string(uuid.NewUUID()), Watches: health,
	}
	if o.CapacitySources != "" {
		// The mirror's Node writes have a rate limit of their own: at the
		// shared 20/s a fresh install of 5000 nodes took 249 s to read
		// them all (issue 55 §6), with every pod that draws an IP waiting.
		wrc := rest.CopyConfig(rc)
		wrc.QPS, wrc.Burst = o.SourceQPS, o.SourceBurst
		writer, err := kube.Clientset(wrc)
		if err != nil {
			return nil, err
		}
		c.Capacity, err = capacitysource.New(capacitysource.Config{
			Client:   cs,
			Writer:   writer,
			Dynamic:  dyn,
			Sources:  o.sources,
			Recorder: b.NewRecorder(scheme, corev1.EventSource{Component: "capscale-capacity-sources"}),
			Metrics:  capacitysource.NewMetrics(reg),
			Workers:  o.SourceWorkers,
		})
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Run serves health and metrics, and runs the controllers while this
// process holds the Lease. Losing the Lease ends Run with an error: the
// caches may be stale and another replica is acting, so the process exits
// and starts afresh, as kube-controller-manager does.
func (c *Config) Run(ctx context.Context) error {
	o := c.Options
	klog.InfoS("Starting capscale controller", "version", version.Version, "identity", c.Identity, "leaderElect", o.LeaderElect)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	c.Broadcaster.StartStructuredLogging(3)
	c.Broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	defer c.Broadcaster.Shutdown()

	c.Registry.MustRegister(elasticweb.NewLeaderGauge(c.leading.Load))
	watchdog := leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)

	serveErr := make(chan error, 1)
	if o.BindAddress != "" {
		go func() {
			serveErr <- httpserver.Serve(ctx, httpserver.Options{Addr: o.BindAddress, ShutdownTimeout: o.ShutdownTimeout}, c.handler(watchdog), nil)
		}()
	} else {
		serveErr <- nil
	}

	var runErr error
	if !o.LeaderElect {
		c.leading.Store(true)
		runErr = c.runControllers(ctx)
	} else {
		runErr = c.runElected(ctx, watchdog)
	}
	cancel()
	if err := <-serveErr; err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

func (c *Config) runElected(ctx context.Context, watchdog *leaderelection.HealthzAdaptor) error {
	o := c.Options
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.LeaseNamespace, o.LeaseName,
		c.Client.CoreV1(), c.Client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: c.Identity})
	if err != nil {
		return fmt.Errorf("creating the Lease lock: %w", err)
	}
	var ctrlErr error
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
		// A clean stop hands the Lease over at once instead of making the
		// standby wait out the lease duration.
		ReleaseOnCancel: true,
		WatchDog:        watchdog,
		Name:            o.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				klog.InfoS("Leading: starting controllers", "lease", klog.KRef(o.LeaseNamespace, o.LeaseName))
				c.leading.Store(true)
				ctrlErr = c.runControllers(ctx)
			},
			OnStoppedLeading: func() { c.leading.Store(false) },
			OnNewLeader: func(id string) {
				if id != c.Identity {
					klog.InfoS("Standing by", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("setting up leader election: %w", err)
	}
	le.Run(ctx)
	if ctrlErr != nil {
		return ctrlErr
	}
	if ctx.Err() == nil {
		return errors.New("lost the lease: exiting so that a fresh start rebuilds the caches")
	}
	klog.InfoS("Stopped")
	return nil
}

// runControllers runs the ElasticWeb controller and, if configured, the
// capacity-source mirror until ctx ends or one of them fails, which stops
// the other.
func (c *Config) runControllers(ctx context.Context) error {
	if c.Capacity == nil {
		return c.Controller.Run(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- c.Controller.Run(ctx) }()
	go func() { errs <- c.Capacity.Run(ctx) }()
	first := <-errs
	cancel()
	if second := <-errs; first == nil {
		first = second
	}
	return first
}

// synced reports whether every controller's informers have synced.
func (c *Config) synced() bool {
	return c.Controller.HasSynced() && (c.Capacity == nil || c.Capacity.HasSynced())
}

// handler serves /healthz (failing when this replica leads but has not
// renewed the Lease in time), /readyz (a standby is ready; the leader once
// its caches synced, and while their watches are connected) and /metrics.
func (c *Config) handler(watchdog *leaderelection.HealthzAdaptor) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := watchdog.Check(r); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if c.leading.Load() && !c.synced() {
			http.Error(w, "leading, informers not synced yet", http.StatusServiceUnavailable)
			return
		}
		if c.leading.Load() && c.Watches != nil {
			if err := c.Watches.Check(); err != nil {
				http.Error(w, "leading, "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.Registry, promhttp.HandlerOpts{}))
	return mux
}
