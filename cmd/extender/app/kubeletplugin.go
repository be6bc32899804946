package app

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/capscale/capscale/extender/nodeplugin"
	"github.com/capscale/capscale/internal/command"
	"github.com/capscale/capscale/internal/kube"
)

// KubeletPluginOptions are the flags of `extender kubelet-plugin`.
type KubeletPluginOptions struct {
	Kubeconfig string
	// NodeName defaults to $NODE_NAME (the DaemonSet's downward API).
	NodeName string
	// RegistryDir and PluginDir: nodeplugin.Config's.
	RegistryDir, PluginDir string
	// HealthPort, if not 0, serves /readyz on 127.0.0.1 (the DaemonSet
	// runs on the host's network).
	HealthPort int
	Logs       *logsapi.LoggingConfiguration
}

// NewKubeletPluginOptions returns the defaults: the kubelet's own
// directories under /var/lib/kubelet.
func NewKubeletPluginOptions() *KubeletPluginOptions {
	return &KubeletPluginOptions{
		NodeName:    os.Getenv("NODE_NAME"),
		RegistryDir: kubeletplugin.KubeletRegistryDir,
		PluginDir:   filepath.Join(kubeletplugin.KubeletPluginsDir, nodeplugin.Driver),
		Logs:        logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns the options as named flag sets.
func (o *KubeletPluginOptions) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("kubelet plugin")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file; empty uses the in-cluster config. The plugin only reads the ResourceClaims the kubelet asks it to prepare.")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "The node the plugin runs on (default $NODE_NAME): the pool whose devices it prepares.")
	fs.StringVar(&o.RegistryDir, "kubelet-registry-dir", o.RegistryDir, "The kubelet's plugin registration directory (<kubelet root dir>/plugins_registry), where the plugin's registration socket goes.")
	fs.StringVar(&o.PluginDir, "plugin-dir", o.PluginDir, "Directory of the plugin's own socket (dra.sock), which the kubelet dials; created if missing, the same path in the container and on the host.")
	fs.IntVar(&o.HealthPort, "health-port", o.HealthPort, "Port of 127.0.0.1 to serve /readyz on for the kubelet's readiness probe: 200 once the kubelet registered the plugin, 503 before; the device publisher (--kubelet-plugin-selector) publishes a node's free devices only while the plugin's pod there is Ready. 0: none.")
	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// Validate reports every invalid flag.
func (o *KubeletPluginOptions) Validate() []error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, fmt.Errorf("--node-name (or $NODE_NAME) must name the node the plugin runs on"))
	}
	for name, dir := range map[string]string{"--kubelet-registry-dir": o.RegistryDir, "--plugin-dir": o.PluginDir} {
		if !filepath.IsAbs(dir) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path, got %q", name, dir))
		}
	}
	if o.HealthPort < 0 || o.HealthPort > 65535 {
		errs = append(errs, fmt.Errorf("--health-port must be between 0 and 65535, got %d", o.HealthPort))
	}
	for _, err := range logsapi.Validate(o.Logs, nil, nil) {
		errs = append(errs, err)
	}
	return errs
}

// kubeletPluginConfig is the plugin, built.
type kubeletPluginConfig struct{ nodeplugin.Config }

// Config builds the client.
func (o *KubeletPluginOptions) Config() (*kubeletPluginConfig, error) {
	cfg, err := kube.RESTConfig(o.Kubeconfig, "extender-kubelet-plugin")
	if err != nil {
		return nil, err
	}
	cs, err := kube.Clientset(cfg)
	if err != nil {
		return nil, err
	}
	c := nodeplugin.Config{Client: cs, NodeName: o.NodeName, RegistryDir: o.RegistryDir, PluginDir: o.PluginDir}
	if o.HealthPort != 0 {
		// Loopback only: the kubelet probes from the host, and nothing
		// else needs to reach it.
		c.HealthAddress = net.JoinHostPort("127.0.0.1", strconv.Itoa(o.HealthPort))
	}
	return &kubeletPluginConfig{c}, nil
}

// Run serves the plugin until ctx ends.
func (c *kubeletPluginConfig) Run(ctx context.Context) error { return nodeplugin.Run(ctx, c.Config) }

// newKubeletPluginCommand is `extender kubelet-plugin`, DRA mode's node
// half, one per node (the chart's DaemonSet): the same binary as the
// device publisher, since both are the driver ip.capscale.io.
func newKubeletPluginCommand(ctx context.Context) *cobra.Command {
	o := NewKubeletPluginOptions()
	cmd := &cobra.Command{
		Use:   "kubelet-plugin",
		Short: "Serve the kubelet plugin of the DRA driver " + nodeplugin.Driver + " on this node (DRA mode)",
		Long: `kubelet-plugin registers the DRA driver ` + nodeplugin.Driver + ` with this node's
kubelet, so that the kubelet runs pods whose claims hold underlay-IP devices
(DRA mode, --publish-devices) without the alpha gate
DRAOptionalNodeOperations. Preparing a claim returns its devices and injects
nothing (the CNI hands out the IP; the claim only counts it); unpreparing does
nothing. It reads the claims the kubelet names and writes nothing. With
--health-port it is Ready (/readyz on 127.0.0.1) once the kubelet registered
it, and it exits non-zero if the kubelet refuses the registration.`,
		Args: cobra.NoArgs,
	}
	return command.Wire(ctx, cmd, o.Logs, o.Flags(), o.Validate, o.Config)
}
