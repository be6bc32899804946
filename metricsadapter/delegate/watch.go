package delegate

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/capscale/capscale/metricsadapter/apiservice"
)

// Routing says how the delegate's Service is dialled.
type Routing string

const (
	// RoutingEndpoints dials the Service's ready endpoints, like
	// kube-apiserver's --enable-aggregator-routing (the default).
	RoutingEndpoints Routing = "endpoints"
	// RoutingService dials <name>.<namespace>.svc:<port> through cluster DNS
	// and kube-proxy.
	RoutingService Routing = "service"
)

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	Provider    *Provider
	Kube        kubernetes.Interface
	Aggregator  aggregator.Interface
	Credentials *rest.Config
	Routing     Routing
	Timeout     time.Duration
	MaxBytes    int64
	// Discovery is how often the delegate's metric names are listed.
	Discovery time.Duration
	Metrics   *Metrics
}

// Watcher follows the delegate record on the APIService and keeps the
// Provider's delegate in step: a forwarder per record, the endpoints of its
// Service, and its advertised metric names.
type Watcher struct {
	o        WatcherOptions
	informer cache.SharedIndexInformer

	mu      sync.Mutex
	current *apiservice.Target
	stop    context.CancelFunc
}

// NewWatcher watches only the APIService apiservice.Name (a field selector,
// so RBAC may restrict it by resourceNames).
func NewWatcher(o WatcherOptions) *Watcher {
	lw := cache.NewListWatchFromClient(o.Aggregator.ApiregistrationV1().RESTClient(), "apiservices", "",
		fields.OneTermEqualSelector("metadata.name", apiservice.Name))
	w := &Watcher{o: o, informer: cache.NewSharedIndexInformer(lw, &apiregv1.APIService{}, 0, cache.Indexers{})}
	return w
}

// HasSynced reports whether the record has been read once.
func (w *Watcher) HasSynced() bool { return w.informer.HasSynced() }

// Run watches until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	update := func(obj any) {
		api, ok := obj.(*apiregv1.APIService)
		if !ok {
			return
		}
		rec, err := apiservice.ParseRecord(api)
		if err != nil {
			klog.ErrorS(err, "Ignoring the delegate record; forwarding stops")
		}
		w.apply(ctx, rec)
	}
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
		DeleteFunc: func(any) { w.apply(ctx, nil) },
	})
	w.informer.Run(ctx.Done())
	w.apply(ctx, nil)
}

// apply switches to the delegate of rec (nil: none) when it changed.
func (w *Watcher) apply(ctx context.Context, rec *Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var t *apiservice.Target
	if rec != nil {
		tt := rec.Target()
		t = &tt
	}
	if sameTarget(w.current, t) {
		return
	}
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
	w.current = t
	if t == nil {
		w.o.Provider.SetDelegate(nil, nil)
		klog.InfoS("No external-metrics delegate: capscale answers every metric itself")
		return
	}
	dctx, cancel := context.WithCancel(ctx)
	w.stop = cancel
	addrs := w.addresses(dctx, *t)
	f, err := NewForwarder(ForwarderOptions{Target: *t, Credentials: w.o.Credentials, Addresses: addrs,
		Timeout: w.o.Timeout, MaxBytes: w.o.MaxBytes, Metrics: w.o.Metrics})
	if err != nil {
		klog.ErrorS(err, "Cannot forward to the delegate", "delegate", t.String())
		w.o.Provider.SetDelegate(nil, nil)
		return
	}
	w.o.Provider.SetDelegate(f, nil)
	klog.InfoS("Forwarding external metrics not named capscale-* to the delegate", "delegate", t.String(), "routing", w.o.Routing)
	go w.discover(dctx, f)
}

// Record is apiservice.Record, named here for readability.
type Record = apiservice.Record

func sameTarget(a, b *apiservice.Target) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Namespace == b.Namespace && a.Name == b.Name && a.Port == b.Port && bytes.Equal(a.CABundle, b.CABundle)
}

// addresses returns how to find the delegate's host:port candidates; with
// endpoint routing it starts informers on its one Service and its
// EndpointSlices, stopped with ctx.
func (w *Watcher) addresses(ctx context.Context, t apiservice.Target) func() ([]string, error) {
	if w.o.Routing == RoutingService {
		addr := net.JoinHostPort(t.Name+"."+t.Namespace+".svc", strconv.Itoa(int(t.Port)))
		return func() ([]string, error) { return []string{addr}, nil }
	}
	svcs := informers.NewSharedInformerFactoryWithOptions(w.o.Kube, 0, informers.WithNamespace(t.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", t.Name).String()
		}))
	slices := informers.NewSharedInformerFactoryWithOptions(w.o.Kube, 0, informers.WithNamespace(t.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: t.Name}).String()
		}))
	svcLister := svcs.Core().V1().Services().Lister()
	sliceLister := slices.Discovery().V1().EndpointSlices().Lister()
	svcSynced := svcs.Core().V1().Services().Informer().HasSynced
	sliceSynced := slices.Discovery().V1().EndpointSlices().Informer().HasSynced
	svcs.Start(ctx.Done())
	slices.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		svcs.Shutdown()
		slices.Shutdown()
	}()
	return func() ([]string, error) {
		if !svcSynced() || !sliceSynced() {
			return nil, fmt.Errorf("its Service and endpoints are not read yet")
		}
		svc, err := svcLister.Services(t.Namespace).Get(t.Name)
		if err != nil {
			return nil, fmt.Errorf("the Service %s/%s: %w", t.Namespace, t.Name, err)
		}
		ss, err := sliceLister.EndpointSlices(t.Namespace).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		return Endpoints(svc, ss, t.Port)
	}
}

// discover refreshes the delegate's advertised names until ctx is done; on
// failure the last list stays, so a slow delegate does not vanish from
// discovery.
func (w *Watcher) discover(ctx context.Context, f *Forwarder) {
	var last []string
	for {
		// The first attempts come quickly: the endpoints may not be read yet.
		names, err := f.Discover(ctx)
		switch {
		case err == nil && !equal(names, last):
			last = names
			w.mu.Lock()
			if ctx.Err() == nil {
				w.o.Provider.SetAdvertised(names)
			}
			w.mu.Unlock()
			klog.V(2).InfoS("Delegate's metrics listed", "delegate", f.target.String(), "count", len(names))
		case err != nil && ctx.Err() == nil:
			klog.V(2).InfoS("Listing the delegate's metrics failed; keeping the last list", "delegate", f.target.String(), "err", err)
		}
		wait := w.o.Discovery
		if last == nil {
			wait = min(wait, time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
