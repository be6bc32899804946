package app

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/extender/binderlease"
	"github.com/capscale/capscale/extender/devices"
	"github.com/capscale/capscale/extender/publisher"
	"github.com/capscale/capscale/extender/release"
	"github.com/capscale/capscale/extender/sourced"
	"github.com/capscale/capscale/extender/wire"
	"github.com/capscale/capscale/internal/kube"
)

// Config is everything Run needs, built from Options.
type Config struct {
	Options *Options
	Client  kubernetes.Interface
	// LeaseClient renews the Leases (binder, publisher) within a rate
	// limit of its own.
	LeaseClient kubernetes.Interface
	Registry    *prometheus.Registry
	Factory     informers.SharedInformerFactory
	Ledger      *extender.Ledger
	Tracker     *extender.Tracker
	Metrics     *extender.Metrics
	Waiting     *extender.Waiting // nil when --requeue-qps is 0
	// PendingPods tells Waiting of pending pods deleted; nil with Waiting.
	// It belongs to no factory: Run runs it.
	PendingPods cache.SharedIndexInformer
	Publisher   *publisher.Publisher
	// Devices is DRA mode's device publisher (--publish-devices).
	Devices *devices.Publisher
	// Releaser removes native mode's release finalizer (with Publisher).
	Releaser *release.Releaser
	// BinderLease gates every bind (extender/binderlease).
	BinderLease *binderlease.Lease
	Handler     http.Handler
	// Synced reports whether the ledger is rebuilt from the informers.
	Synced func() bool
	// Sources is the extender's own read of the capacity sources
	// (--capacity-sources), nil without it; nodesSynced is the Node
	// informer's, which it waits for.
	Sources     *sourced.Reader
	nodesSynced cache.InformerSynced
	// Listening, if set, receives the API server's bound address.
	Listening func(net.Addr)
	// MaxProcs, if positive, is the GOMAXPROCS Run sets. Only Config (the
	// binary's path) sets it: a test running the extender in its own
	// process keeps its parallelism.
	MaxProcs int
}

// Leases' own client-side rate limit: a renewal every RetryPeriod (2 s) for
// each of the binder and publisher Leases, a read before each, and the
// Events they record.
const leaseQPS, leaseBurst = 5, 10

// clients are the extender's connections to the apiserver.
type clients struct {
	// main carries the informers, the reconciler's reads and the
	// requeuer's patches, within --kube-api-qps.
	main kubernetes.Interface
	// binds sends the Bindings with no limiter of its own: throttle waits
	// for main's, so that a wait cut short is known never to have sent one.
	binds    kubernetes.Interface
	throttle func(context.Context) error
	// leases renews the binder and publisher Leases with a limiter of its
	// own, so that no backlog of binds delays a renewal.
	leases kubernetes.Interface
	// release removes native mode's release finalizer, within main's
	// limiter but outside the readiness WatchHealth follows; nil is main.
	release kubernetes.Interface
	// publish writes the capacity publisher's Node status with a limiter
	// of its own (--publish-qps), so that neither it nor the binds wait
	// on the other; nil is main.
	publish kubernetes.Interface
	// sources watches the capacity sources' objects (--capacity-sources);
	// nil without them.
	sources dynamic.Interface
}

// Config connects to the apiserver and builds the extender.
func (o *Options) Config() (*Config, error) {
	cfg, err := kube.RESTConfig(o.Kubeconfig, component)
	if err != nil {
		return nil, err
	}
	c, health, err := o.clients(cfg)
	if err != nil {
		return nil, err
	}
	// The pending pods' metadata, for the waiting set (metadata only: a
	// fraction of a pod's decode cost).
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	conf, err := o.config(c, mc, health)
	if err != nil {
		return nil, err
	}
	conf.MaxProcs = o.MaxProcs
	return conf, nil
}

// clients makes the extender's connections from cfg, which then carries
// the main limiter and the watches' health.
func (o *Options) clients(cfg *rest.Config) (c clients, health *kube.WatchHealth, err error) {
	limiter := flowcontrol.NewTokenBucketRateLimiter(o.KubeAPIQPS, o.KubeAPIBurst)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = o.KubeAPIQPS, o.KubeAPIBurst, limiter
	c.throttle = limiter.Wait
	// The releaser's pod watch runs on the leader only, from each term's
	// start, and must not turn the verbs' readiness off while it lists.
	if c.release, err = kube.Clientset(rest.CopyConfig(cfg)); err != nil {
		return c, nil, err
	}
	if o.PublishCapacity {
		pub := rest.AddUserAgent(rest.CopyConfig(cfg), "publisher")
		pub.QPS, pub.Burst, pub.RateLimiter = o.PublishQPS, o.PublishBurst, nil
		if c.publish, err = kube.Clientset(pub); err != nil {
			return c, nil, err
		}
	}
	if o.CapacitySources != "" {
		// Its watches are the IPAM's, not the ledger's: outside the
		// readiness WatchHealth follows, as capscale-scheduler's read.
		if c.sources, err = dynamic.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "capacity-sources")); err != nil {
			return c, nil, err
		}
	}
	// The informers' watches decide readiness too: see kube.WatchHealth.
	health = kube.NewWatchHealth()
	cfg.Wrap(health.Wrap)
	if c.main, err = kube.Clientset(cfg); err != nil {
		return c, nil, err
	}
	binds := rest.CopyConfig(cfg)
	binds.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	if c.binds, err = kube.Clientset(binds); err != nil {
		return c, nil, err
	}
	leases := rest.AddUserAgent(rest.CopyConfig(cfg), "leases")
	leases.QPS, leases.Burst, leases.RateLimiter = leaseQPS, leaseBurst, nil
	if c.leases, err = kube.Clientset(leases); err != nil {
		return c, nil, err
	}
	return c, health, nil
}

// ConfigWithClient builds the extender around the given clientset, for
// everything. Without a metadata client its waiting set learns of a pending
// pod's deletion only when a requeue touch finds it gone.
func (o *Options) ConfigWithClient(cs kubernetes.Interface) (*Config, error) {
	return o.config(clients{main: cs, binds: cs, leases: cs}, nil, nil)
}

// config builds the extender; health, if not nil, follows the watches of
// c.main.
func (o *Options) config(c clients, mc metadata.Interface, health *kube.WatchHealth) (*Config, error) {
	cs := c.main
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := extender.NewMetrics(reg)

	factory := kube.InformerFactory(cs)
	podInformer, err := extender.PodInformer(factory)
	if err != nil {
		return nil, err
	}
	newNodeInformer := extender.NodeInformer
	if o.CapacitySources != "" {
		newNodeInformer = extender.NodeInformerWithLabels
	}
	nodeInformer, err := newNodeInformer(factory)
	if err != nil {
		return nil, err
	}
	var waiting *extender.Waiting
	if o.RequeueQPS > 0 {
		waiting = extender.NewWaiting(nil)
	}
	ledger := extender.NewLedger(extender.LedgerOptions{
		DefaultCapacity:     o.DefaultCapacity,
		AwaitCapacitySource: o.AwaitCapacitySource,
		ReservationTTL:      o.ReservationTTL,
	})
	extender.RegisterLedger(reg, ledger)
	extender.RegisterWaiting(reg, waiting)
	tracker := &extender.Tracker{Ledger: ledger, Waiting: waiting, Metrics: metrics}
	var read *sourced.Reader
	if o.CapacitySources != "" {
		if c.sources == nil {
			return nil, fmt.Errorf("--capacity-sources needs a client of the sources' resources")
		}
		read = sourced.New(factory.Core().V1().Nodes().Lister(), reg)
		view, err := capacitysource.NewView(c.sources, o.sources, capacitysource.NewExtenderViewMetrics(reg), read.Changed)
		if err != nil {
			return nil, err
		}
		read.SetView(view)
		// The ledger counts what a node's pool gives by the sources too
		// (draws all, the IPAM's report), so it follows their changes.
		tracker.Over = read.Over
		read.OnChange(tracker.SetNode)
	}
	synced, err := tracker.Attach(podInformer, nodeInformer)
	if err != nil {
		return nil, err
	}
	if read != nil {
		// Until the sources are read every node counts 0, "not read yet":
		// a replica that answered then would turn away pods another one
		// places (CI, stop 77). It stays out of the Service and its verbs
		// answer 503, which kube-scheduler retries, until it has read them.
		informers := synced
		synced = func() bool { return informers() && read.HasSynced() }
	}
	var pending cache.SharedIndexInformer
	if waiting != nil && mc != nil {
		if pending, err = extender.PendingPodInformer(mc); err != nil {
			return nil, err
		}
		if err := tracker.AttachPending(pending, extender.IndexerLookup(podInformer.GetIndexer())); err != nil {
			return nil, err
		}
	}
	var pub *publisher.Publisher
	var rel *release.Releaser
	if o.PublishCapacity {
		pc := c.publish
		if pc == nil {
			pc = cs
		}
		po := publisher.Options{
			Rule: ledger.Rule(),
			// A node with an invalid capacity publishes what its pods hold,
			// and binds in flight (extender mode) are about to hold it.
			// kube-scheduler counts requests only: what is in use is the
			// requests, and the pods that ask for none are Drawn.
			InUse:       ledger.Requested,
			Drawn:       ledger.Drawn,
			Unlisted:    ledger.Unlisted,
			InUseSynced: synced,
			Registerer:  reg,
			Workers:     o.PublishWorkers,
		}
		if read != nil {
			po.Sources = read
		}
		pub, err = publisher.New(pc, factory.Core().V1().Nodes(), po)
		if err != nil {
			return nil, err
		}
		if read != nil {
			read.OnChange(pub.SourceChanged)
		}
		// Set before the informers start (Run), so no event races it.
		tracker.UsageChanged = pub.UsageChanged
		rc := c.release
		if rc == nil {
			rc = cs
		}
		if rel, err = release.New(rc, factory.Core().V1().Nodes(), reg); err != nil {
			return nil, err
		}
	}
	var devs *devices.Publisher
	if o.PublishDevices {
		var plugins labels.Selector
		if o.KubeletPluginSelector != "" {
			if plugins, err = labels.Parse(o.KubeletPluginSelector); err != nil {
				return nil, fmt.Errorf("--kubelet-plugin-selector: %w", err)
			}
		}
		devs, err = devices.New(cs, factory.Core().V1().Nodes(), devices.Options{
			Rule: ledger.Rule(), InUse: ledger.Requested, Drawn: ledger.Drawn, Unlisted: ledger.Unlisted,
			InUseSynced: synced, Registerer: reg, SkipNodeOperations: o.SkipNodeOperations,
			PluginSelector: plugins, PluginNamespace: o.KubeletPluginNamespace,
		})
		if err != nil {
			return nil, err
		}
		tracker.UsageChanged = devs.UsageChanged
		rc := c.release
		if rc == nil {
			rc = cs
		}
		if rel, err = release.New(rc, factory.Core().V1().Nodes(), reg); err != nil {
			return nil, err
		}
	}
	lease, err := binderlease.New(c.leases, o.LeaderElectNamespace, o.BinderID, reg)
	if err != nil {
		return nil, err
	}
	binder := extender.NewBinder(cs, extender.IndexerLookup(podInformer.GetIndexer()), ledger)
	binder.Gate, binder.BindClient, binder.Throttle = lease.Until, c.binds, c.throttle
	handler := wire.NewHandler(wire.HandlerOptions{
		Ledger:          ledger,
		Binder:          binder,
		Waiting:         waiting,
		CapacityMoves:   read != nil,
		Metrics:         metrics,
		Ready:           ready(synced, health),
		MaxRequestBytes: o.MaxRequestBytes,
		Registerer:      reg,
		Gatherer:        reg,
	})
	return &Config{
		Options: o, Client: cs, LeaseClient: c.leases, Registry: reg, Factory: factory, Ledger: ledger, Tracker: tracker, Metrics: metrics,
		Waiting: waiting, PendingPods: pending, Publisher: pub, Devices: devs, Releaser: rel, BinderLease: lease, Handler: handler, Synced: synced,
		Sources: read, nodesSynced: nodeInformer.HasSynced,
	}, nil
}

// ready is the ledger's readiness: rebuilt from the informers once, and
// their watches connected now. A ledger that misses events (the apiserver was
// restarted and the watch is not back) must not decide binds: the verbs
// answer 503 until it follows the apiserver again.
func ready(synced func() bool, health *kube.WatchHealth) func() bool {
	if health == nil {
		return synced
	}
	return func() bool { return synced() && health.Check() == nil }
}
