package nodeplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/httpserver"
)

// Plugin is kubeletplugin's DRAPlugin over Prepare and Unprepare.
type Plugin struct {
	node string
	// fatal ends Run: kubeletplugin reports an error that retrying does
	// not cure (a gRPC server that stopped).
	fatal func(error)
}

var _ kubeletplugin.DRAPlugin = (*Plugin)(nil)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, claims []*resourcev1.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := Prepare(p.node, claims)
	logger := klog.FromContext(ctx)
	for _, c := range claims {
		if r := out[c.UID]; r.Err != nil {
			logger.Error(r.Err, "Refusing to prepare a claim", "claim", klog.KObj(c))
		} else {
			logger.V(2).Info("Prepared a claim", "claim", klog.KObj(c), "devices", len(r.Devices))
		}
	}
	return out, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (p *Plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	return Unprepare(claims), nil
}

// HandleError implements kubeletplugin.DRAPlugin: log, and end Run on an
// error that is not recoverable.
func (p *Plugin) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		p.fatal(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin; Run turns the
// health service off, so the kubelet never asks: an IP has no health of
// its own.
func (p *Plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// Config is what Run needs.
type Config struct {
	// Client reads the claims the kubelet asks to prepare (get
	// resourceclaims); nothing else.
	Client kubernetes.Interface
	// NodeName is the node the plugin runs on: its pool.
	NodeName string
	// RegistryDir is the kubelet's plugin registration directory
	// (<kubelet root>/plugins_registry), where the plugin's registration
	// socket goes.
	RegistryDir string
	// PluginDir holds the plugin's own socket, dra.sock, which the kubelet
	// dials; created if missing.
	PluginDir string
	// HealthAddress, if set, is host:port of /readyz: 200 once the kubelet
	// registered the plugin, 503 before and while stopping.
	HealthAddress string
	// HealthListening, if set, receives the address /readyz is served on.
	HealthListening func(net.Addr)
}

// Run registers the plugin with the kubelet and serves it until ctx is
// done or the plugin fails.
func Run(ctx context.Context, c Config) error {
	if err := os.MkdirAll(c.PluginDir, 0o750); err != nil {
		return fmt.Errorf("creating the plugin directory %s: %w", c.PluginDir, err)
	}
	var health net.Listener
	if c.HealthAddress != "" {
		// Listen first: a port already taken fails the start, not a probe.
		var err error
		if health, err = net.Listen("tcp", c.HealthAddress); err != nil {
			return fmt.Errorf("listening for /readyz on %s: %w", c.HealthAddress, err)
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p := &Plugin{node: c.NodeName, fatal: cancel}
	reg := &registration{refused: cancel}
	served := make(chan struct{})
	if health != nil {
		go func() {
			defer close(served)
			if err := httpserver.ServeListener(ctx, httpserver.Options{ShutdownTimeout: time.Second}, health, reg, c.HealthListening); err != nil {
				cancel(fmt.Errorf("serving /readyz: %w", err))
			}
		}()
	} else {
		close(served)
	}
	defer func() { <-served }()
	h, err := kubeletplugin.Start(ctx, p,
		kubeletplugin.DriverName(Driver),
		kubeletplugin.KubeClient(c.Client),
		kubeletplugin.NodeName(c.NodeName),
		kubeletplugin.RegistrarDirectoryPath(c.RegistryDir),
		kubeletplugin.PluginDataDirectoryPath(c.PluginDir),
		kubeletplugin.HealthService(false),
		kubeletplugin.GRPCInterceptor(reg.intercept),
	)
	if err != nil {
		cancel(nil)
		return fmt.Errorf("starting the kubelet plugin of %s: %w", Driver, err)
	}
	klog.InfoS("Serving the kubelet plugin", "driver", Driver, "node", klog.KRef("", c.NodeName), "registryDir", c.RegistryDir, "pluginDir", c.PluginDir)
	<-ctx.Done()
	reg.stopping.Store(true)
	h.Stop()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
