package app

import (
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/extender/publisher"
	"github.com/capscale/capscale/internal/kube"
)

// Config is everything Run needs, built from Options.
type Config struct {
	Options   *Options
	Client    kubernetes.Interface
	Registry  *prometheus.Registry
	Factory   informers.SharedInformerFactory
	Ledger    *extender.Ledger
	Waiting   *extender.Waiting // nil when --requeue-qps is 0
	Publisher *publisher.Publisher
	Handler   http.Handler
	// Synced reports whether the ledger is rebuilt from the informers.
	Synced func() bool
	// Listening, if set, receives the API server's bound address.
	Listening func(net.Addr)
}

// Config connects to the apiserver and builds the extender.
func (o *Options) Config() (*Config, error) {
	cfg, err := kube.RESTConfig(o.Kubeconfig, component)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	cs, err := kube.Clientset(cfg)
	if err != nil {
		return nil, err
	}
	return o.ConfigWithClient(cs)
}

// ConfigWithClient builds the extender around the given clientset.
func (o *Options) ConfigWithClient(cs kubernetes.Interface) (*Config, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := extender.NewMetrics(reg)

	factory := kube.InformerFactory(cs)
	podInformer, err := extender.PodInformer(factory)
	if err != nil {
		return nil, err
	}
	nodeInformer := factory.Core().V1().Nodes().Informer()
	var waiting *extender.Waiting
	if o.RequeueQPS > 0 {
		waiting = extender.NewWaiting(nil)
	}
	ledger := extender.NewLedger(extender.LedgerOptions{
		DefaultCapacity: o.DefaultCapacity,
		ReservationTTL:  o.ReservationTTL,
		Metrics:         metrics,
		Waiting:         waiting,
	})
	synced, err := ledger.Attach(podInformer, nodeInformer)
	if err != nil {
		return nil, err
	}
	var pub *publisher.Publisher
	if o.PublishCapacity {
		if pub, err = publisher.New(cs, factory.Core().V1().Nodes(), o.DefaultCapacity, reg); err != nil {
			return nil, err
		}
	}
	binder := extender.NewBinder(cs, extender.IndexerLookup(podInformer.GetIndexer()), ledger)
	handler := extender.NewHandler(extender.HandlerOptions{
		Ledger:          ledger,
		Binder:          binder,
		Ready:           synced,
		MaxRequestBytes: o.MaxRequestBytes,
		Registerer:      reg,
		Gatherer:        reg,
	})
	return &Config{
		Options: o, Client: cs, Registry: reg, Factory: factory, Ledger: ledger,
		Waiting: waiting, Publisher: pub, Handler: handler, Synced: synced,
	}, nil
}
