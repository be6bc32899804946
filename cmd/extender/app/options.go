// Package app wires the extender binary: flags, validation, clients,
// informers and the HTTP server.
package app

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/extender/wire"
	"github.com/capscale/capscale/internal/httpserver"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// Options are the extender's command-line options.
type Options struct {
	// BindAddress is host:port of the HTTP(S) server.
	BindAddress string
	// Profiling serves net/http/pprof under /debug/pprof/ on BindAddress
	// (never on the probe port).
	Profiling bool
	// ProbeBindAddress, if set, serves only /healthz, /readyz and /metrics,
	// so kubelet probes and Prometheus reach them on the pod IP while the
	// verbs stay on loopback beside kube-scheduler.
	ProbeBindAddress string
	// Kubeconfig is a kubeconfig file; empty means in-cluster config.
	Kubeconfig string
	// DefaultCapacity is the underlay IP capacity of a node without the
	// capscale.io/underlay-ip-capacity annotation.
	DefaultCapacity int64
	// AwaitCapacitySource: capacity sources are configured; a node the
	// mirror has not read counts 0 (underlay.Rule.AwaitSource).
	AwaitCapacitySource bool
	// TLSCertFile and TLSPrivateKeyFile enable HTTPS (kube-scheduler's
	// enableHTTPS) when both are set.
	TLSCertFile, TLSPrivateKeyFile string
	// MaxRequestBytes bounds request bodies.
	MaxRequestBytes int64
	// ReservationTTL bounds how long a bind with an unknown outcome keeps
	// its IPs reserved.
	ReservationTTL time.Duration
	// ShutdownTimeout bounds graceful shutdown.
	ShutdownTimeout time.Duration
	// KubeAPIQPS and KubeAPIBurst limit calls to the apiserver; every bind
	// is one, so client-go's default of 5 QPS would throttle a burst.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// RequeueQPS bounds the pod updates that ask kube-scheduler to retry
	// pods after IPs were freed (burst: the same number); 0 turns it off.
	RequeueQPS float64
	// BinderID names the scheduler this extender binds for. Extenders with
	// one ID share the binder Lease (the replicas of one scheduler); an
	// extender with another ID refuses every bind while they hold it.
	BinderID string
	// PublishCapacity runs native mode's capacity publisher (leader-elected
	// on a Lease in LeaderElectNamespace).
	PublishCapacity bool
	// PublishQPS and PublishBurst bound the capacity publisher's Node
	// writes, apart from KubeAPIQPS, and PublishWorkers sync that many
	// nodes at once: within the binds' 50 a second a fresh install of
	// 5000 nodes took at least 100 s to publish (issue 55 §6).
	PublishQPS     float32
	PublishBurst   int
	PublishWorkers int
	// CapacitySources, with AwaitCapacitySource, is capscale-controller's
	// --capacity-sources file, read here: the ledger counts what the
	// IPAM's objects say now, and with PublishCapacity the publisher
	// decides on them and writes the mirror's annotations itself.
	CapacitySources string
	// sources are CapacitySources compiled by Validate.
	sources []*capacitysource.Compiled
	// PublishDevices runs DRA mode's device publisher instead (the same
	// Lease): each node's underlay IPs as devices in ResourceSlices.
	PublishDevices bool
	// SkipNodeOperations marks, with PublishDevices, the slices of nodes
	// whose kubelet declares DRAOptionalNodeOperations as needing no
	// kubelet plugin.
	SkipNodeOperations bool
	// KubeletPluginSelector, with PublishDevices, selects the kubelet
	// plugin's pods in KubeletPluginNamespace: a node where none is Ready
	// publishes no free device. Empty: every node publishes.
	KubeletPluginSelector  string
	KubeletPluginNamespace string
	LeaderElectNamespace   string
	// LeaderElectIdentity defaults to the host name and a random suffix.
	LeaderElectIdentity string
	// MaxProcs is the GOMAXPROCS the binary runs with; 0 keeps Go's own
	// choice (the GOMAXPROCS variable, else the CPU limit or every core).
	MaxProcs int
	// Logs are the component-base logging options (-v, --logging-format, ...).
	Logs *logsapi.LoggingConfiguration
}

// maxMaxProcs bounds --max-procs: more than that is a typo, not a machine.
const maxMaxProcs = 1024

// maxPublishWorkers bounds --publish-workers: each is a request in flight.
const maxPublishWorkers = 256

// maxBinderID bounds --binder-id, which is written into a Lease.
const maxBinderID = 128

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		// Loopback by default: the verbs (above all /bind) are not
		// authenticated and only the kube-scheduler beside it calls them.
		BindAddress:            "127.0.0.1:8888",
		DefaultCapacity:        10,
		MaxRequestBytes:        wire.DefaultMaxRequestBytes,
		ReservationTTL:         time.Minute,
		ShutdownTimeout:        10 * time.Second,
		KubeAPIQPS:             50,
		KubeAPIBurst:           100,
		RequeueQPS:             20,
		PublishQPS:             200,
		PublishBurst:           400,
		PublishWorkers:         16,
		LeaderElectNamespace:   "capscale-system",
		KubeletPluginNamespace: "capscale-system",
		BinderID:               "capscale-scheduler",
		// One P: kube-scheduler filters one pod at a time, and every
		// other call waits on the network. With more, each handoff
		// between goroutines wakes an idle P, whose futex and spinning
		// were a fifth of the extender's CPU per pod (BENCHMARKS.md).
		MaxProcs: 1,
		Logs:     logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns the options as named flag sets, for usage output by section.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("extender")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "host:port to serve the extender API, /metrics and probes on. The verbs are not authenticated: keep it on loopback beside kube-scheduler, or use TLS.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go profiles under /debug/pprof/ on --bind-address (loopback by default); off by default.")
	fs.StringVar(&o.ProbeBindAddress, "probe-bind-address", o.ProbeBindAddress, "host:port serving only /healthz, /readyz and /metrics (plain HTTP); empty turns it off.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file; empty uses the in-cluster config.")
	fs.Int64Var(&o.DefaultCapacity, "default-capacity", o.DefaultCapacity, "The "+underlay.DefaultCapacityText+".")
	fs.BoolVar(&o.AwaitCapacitySource, "await-capacity-source", o.AwaitCapacitySource, "Capacity sources are configured (capscale-controller --capacity-sources): a node that carries neither the capscale.io/underlay-ip-capacity annotation nor the mirror's mark (capscale.io/underlay-ip-source-capacity, or capscale.io/underlay-ip-source: none) has not been read yet and counts 0, never the label or --default-capacity. The chart and deploy/capacity-sources set it.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "x509 certificate file for HTTPS; needs --tls-private-key-file.")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "Private key file matching --tls-cert-file.")
	fs.Int64Var(&o.MaxRequestBytes, "max-request-bytes", o.MaxRequestBytes, "Largest request body accepted; the default fits 5000 full Node objects.")
	fs.DurationVar(&o.ReservationTTL, "reservation-ttl", o.ReservationTTL, "How long a bind whose outcome is unknown keeps its IPs reserved unless the pod shows up bound.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long in-flight requests may take to finish on SIGTERM.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Queries per second to the apiserver (each bind is one); kube-scheduler's own client uses 50.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the apiserver.")
	fs.Float64Var(&o.RequeueQPS, "requeue-qps", o.RequeueQPS, "Pod status updates per second (and burst) that ask kube-scheduler to retry pods rejected for lack of underlay IPs once IPs are freed; 0 turns this off and leaves them to kube-scheduler's periodic retry (up to 5 minutes).")
	fs.StringVar(&o.BinderID, "binder-id", o.BinderID, "The scheduler this extender binds for. Only extenders with the binder ID that holds the Lease capscale-underlay-binder (in --leader-elect-namespace) bind; any other refuses every bind, so that two schedulers with capscale extenders cannot over-commit a node. Give every replica of one scheduler the same ID, and another scheduler's extender another.")
	fs.IntVar(&o.MaxProcs, "max-procs", o.MaxProcs, "GOMAXPROCS of the extender: how many threads run Go code at once. 1 spends the least CPU per pod (kube-scheduler calls filter one pod at a time); 0 keeps Go's own choice (the GOMAXPROCS variable, else the container's CPU limit or every core).")
	nfs := fss.FlagSet("native mode")
	nfs.BoolVar(&o.PublishCapacity, "publish-capacity", o.PublishCapacity, "Publish every node's underlay-IP capacity ("+underlay.CapacityRuleText+") as capscale.io/underlay-ip in Node status.capacity and allocatable, so kube-scheduler counts it itself (native mode); an invalid value publishes the IPs in use there, so nothing new fits and nothing running is evicted; and remove the finalizer capscale.io/underlay-ip-release (deploy/native/release.yaml) from each pod once its node gave its IPs back. Leader-elected: one replica writes.")
	nfs.Float32Var(&o.PublishQPS, "publish-qps", o.PublishQPS, "With --publish-capacity: steady Node status writes per second of the publisher, apart from --kube-api-qps (a fresh install writes every Node once: 5000 Nodes take at least 25 s at 200).")
	nfs.IntVar(&o.PublishBurst, "publish-burst", o.PublishBurst, "With --publish-capacity: burst of the publisher's Node writes.")
	nfs.IntVar(&o.PublishWorkers, "publish-workers", o.PublishWorkers, "With --publish-capacity: Nodes the publisher writes at once (one write per Node at a time).")
	nfs.StringVar(&o.CapacitySources, "capacity-sources", o.CapacitySources, "With --await-capacity-source: capscale-controller's capacity-sources file, read here. The extender reads the IPAM's objects itself and counts what they say now in the place of the mirror's annotations, so that a change reaches filter and bind without waiting for the mirror's Node patch. With --publish-capacity (native mode) the publisher also writes the mirror's annotations (capscale.io/underlay-ip-source-capacity and the rest) in the same Node status patch as the capacity: one Node write a change; run capscale-controller without --capacity-sources then, the publisher is the mirror. In extender mode capscale-controller still mirrors them (kubectl capscale ips reads the Nodes). Not with --publish-devices. The chart sets it in native mode (controller.capacitySources.publisherReads) and, with controller.capacitySources.schedulerReads: true, in extender mode.")
	dfs := fss.FlagSet("DRA mode")
	dfs.BoolVar(&o.PublishDevices, "publish-devices", o.PublishDevices, "Publish every node's underlay IPs ("+underlay.CapacityRuleText+") as DRA devices, one per IP, in a ResourceSlice pool per node of the driver "+names.UnderlayIPDriver+", so that kube-scheduler allocates capscale.io/underlay-ip through the DeviceClass "+names.UnderlayIPDeviceClass+" (DRA mode, Kubernetes 1.37 and later); a node whose claims hold more devices than its capacity publishes none until they fall within it, so nothing is free beyond it and no running pod is evicted; and remove the finalizer capscale.io/underlay-ip-release from each pod once its node gave its IPs back, as --publish-capacity does. Leader-elected on the same Lease; not with --publish-capacity.")
	dfs.BoolVar(&o.SkipNodeOperations, "skip-node-operations", o.SkipNodeOperations, "With --publish-devices: mark the ResourceSlices of every node whose kubelet declares the feature DRAOptionalNodeOperations (alpha in Kubernetes 1.37: its gate on kube-apiserver, kube-scheduler and the kubelet) with skipNodeOperations \"*\", so that the kubelet runs pods with underlay IPs without a kubelet plugin of "+names.UnderlayIPDriver+". Nodes that do not declare it are published without it.")
	dfs.StringVar(&o.KubeletPluginSelector, "kubelet-plugin-selector", o.KubeletPluginSelector, "With --publish-devices: a label selector of the kubelet plugin's pods (extender kubelet-plugin, the DaemonSet capscale-dra-kubelet-plugin) in --kubelet-plugin-namespace. A node where none of them is Running and Ready (the kubelet registered it) publishes no free device, so that pods with underlay IPs wait unbound, with kube-scheduler's reason, instead of being bound to a kubelet that cannot prepare their claims; devices that claims hold are not freed. Empty: every node publishes (for --skip-node-operations, where no plugin runs). The chart and deploy/dra set it.")
	dfs.StringVar(&o.KubeletPluginNamespace, "kubelet-plugin-namespace", o.KubeletPluginNamespace, "Namespace of the kubelet plugin's pods (--kubelet-plugin-selector): the extender watches pods there only.")
	nfs.StringVar(&o.LeaderElectNamespace, "leader-elect-namespace", o.LeaderElectNamespace, "Namespace of capscale's Leases: the capacity publisher's (capscale-capacity-publisher) and the binders' (capscale-underlay-binder).")
	nfs.StringVar(&o.LeaderElectIdentity, "leader-elect-identity", o.LeaderElectIdentity, "This replica's identity in the Lease; empty uses the host name and a random suffix.")
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	return fss
}

// AddFlags adds every flag set to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	for _, f := range o.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
}

// Validate reports every invalid option.
func (o *Options) Validate() []error {
	var errs []error
	if err := httpserver.ValidateAddress("--bind-address", o.BindAddress); err != nil {
		errs = append(errs, err)
	}
	if o.ProbeBindAddress != "" {
		if err := httpserver.ValidateAddress("--probe-bind-address", o.ProbeBindAddress); err != nil {
			errs = append(errs, err)
		}
	}
	if o.DefaultCapacity < 0 {
		errs = append(errs, fmt.Errorf("--default-capacity must be >= 0, got %d", o.DefaultCapacity))
	}
	if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
		errs = append(errs, fmt.Errorf("--tls-cert-file and --tls-private-key-file must be set together"))
	}
	if o.MaxRequestBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("--max-request-bytes must be at least 1024, got %d", o.MaxRequestBytes))
	}
	if o.ReservationTTL <= 0 {
		errs = append(errs, fmt.Errorf("--reservation-ttl must be positive, got %s", o.ReservationTTL))
	}
	if o.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout must be positive, got %s", o.ShutdownTimeout))
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps must be positive and --kube-api-burst at least 1, got %v and %d", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if o.PublishQPS <= 0 || o.PublishBurst < 1 {
		errs = append(errs, fmt.Errorf("--publish-qps must be positive and --publish-burst at least 1, got %v and %d", o.PublishQPS, o.PublishBurst))
	}
	if o.PublishWorkers < 1 || o.PublishWorkers > maxPublishWorkers {
		errs = append(errs, fmt.Errorf("--publish-workers must be between 1 and %d, got %d", maxPublishWorkers, o.PublishWorkers))
	}
	if o.RequeueQPS < 0 || o.RequeueQPS > 1000 {
		errs = append(errs, fmt.Errorf("--requeue-qps must be between 0 and 1000, got %v", o.RequeueQPS))
	}
	if o.MaxProcs < 0 || o.MaxProcs > maxMaxProcs {
		errs = append(errs, fmt.Errorf("--max-procs must be between 0 and %d, got %d", maxMaxProcs, o.MaxProcs))
	}
	if o.SkipNodeOperations && !o.PublishDevices {
		errs = append(errs, fmt.Errorf("--skip-node-operations marks the slices --publish-devices writes, and it is not set"))
	}
	if o.KubeletPluginSelector != "" {
		if _, err := labels.Parse(o.KubeletPluginSelector); err != nil {
			errs = append(errs, fmt.Errorf("--kubelet-plugin-selector: %w", err))
		}
		if !o.PublishDevices {
			errs = append(errs, fmt.Errorf("--kubelet-plugin-selector gates the devices --publish-devices publishes, and it is not set"))
		}
		if o.SkipNodeOperations {
			errs = append(errs, fmt.Errorf("--kubelet-plugin-selector holds back every node without a Ready kubelet plugin, and --skip-node-operations is for kubelets that run without one: set one of them"))
		}
		if o.KubeletPluginNamespace == "" {
			errs = append(errs, fmt.Errorf("--kubelet-plugin-namespace must name the namespace of the kubelet plugin's pods"))
		}
	}
	if o.CapacitySources != "" {
		if !o.AwaitCapacitySource {
			errs = append(errs, fmt.Errorf("--capacity-sources is read in the place of the mirror the extender would wait for: it needs --await-capacity-source"))
		}
		if o.PublishDevices {
			errs = append(errs, fmt.Errorf("--capacity-sources and --publish-devices exclude each other: DRA mode's devices follow the mirror's annotations"))
		}
		cs, err := capacitysource.Load(o.CapacitySources)
		if err != nil {
			errs = append(errs, fmt.Errorf("--capacity-sources: %w", err))
		}
		o.sources = cs
	}
	if o.PublishCapacity && o.PublishDevices {
		errs = append(errs, fmt.Errorf("--publish-capacity and --publish-devices exclude each other: kube-scheduler counts a node's capscale.io/underlay-ip from its status when it has some there, and ignores its devices then"))
	}
	if o.LeaderElectNamespace == "" {
		errs = append(errs, fmt.Errorf("--leader-elect-namespace must name the namespace of capscale's Leases"))
	}
	if o.BinderID == "" || len(o.BinderID) > maxBinderID {
		errs = append(errs, fmt.Errorf("--binder-id must be 1 to %d characters, got %q", maxBinderID, o.BinderID))
	}
	for _, err := range logsapi.Validate(o.Logs, nil, nil) {
		errs = append(errs, err)
	}
	return errs
}
