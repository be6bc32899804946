package app

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func parseKubeletPlugin(t *testing.T, argv ...string) *KubeletPluginOptions {
	t.Helper()
	o := NewKubeletPluginOptions()
	fs := pflag.NewFlagSet("kubelet-plugin", pflag.ContinueOnError)
	for _, s := range o.Flags().FlagSets {
		fs.AddFlagSet(s)
	}
	if err := fs.Parse(argv); err != nil {
		t.Fatalf("parsing %v: %v", argv, err)
	}
	return o
}

func TestKubeletPluginOptions(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	for _, tc := range []struct {
		name    string
		argv    []string
		check   func(*KubeletPluginOptions) bool
		wantErr string
	}{
		{
			name: "defaults: the kubelet's directories, the node from the downward API",
			check: func(o *KubeletPluginOptions) bool {
				return o.NodeName == "from-env" && o.RegistryDir == "/var/lib/kubelet/plugins_registry" &&
					o.PluginDir == "/var/lib/kubelet/plugins/ip.capscale.io" && o.Kubeconfig == ""
			},
		},
		{
			name: "what the e2e harness passes",
			argv: []string{"--node-name=real-node-0", "--kubeconfig=/k", "--kubelet-registry-dir=/n/kubelet/plugins_registry", "--plugin-dir=/n/kubelet/plugins/ip.capscale.io", "--v=2"},
			check: func(o *KubeletPluginOptions) bool {
				return o.NodeName == "real-node-0" && o.Kubeconfig == "/k" && o.RegistryDir == "/n/kubelet/plugins_registry" &&
					o.PluginDir == "/n/kubelet/plugins/ip.capscale.io" && o.Logs.Verbosity == 2
			},
		},
		{
			name:  "what the chart's DaemonSet passes",
			argv:  []string{"--kubelet-registry-dir=/var/lib/kubelet/plugins_registry", "--plugin-dir=/var/lib/kubelet/plugins/ip.capscale.io", "--health-port=9809"},
			check: func(o *KubeletPluginOptions) bool { return o.HealthPort == 9809 },
		},
		{name: "no node", argv: []string{"--node-name="}, wantErr: "--node-name (or $NODE_NAME) must name"},
		{name: "bad health port", argv: []string{"--health-port=70000"}, wantErr: "--health-port must be between 0 and 65535"},
		{name: "relative plugin dir", argv: []string{"--plugin-dir=plugins"}, wantErr: "--plugin-dir must be an absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := parseKubeletPlugin(t, tc.argv...)
			errs := o.Validate()
			if tc.wantErr != "" {
				if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
					t.Errorf("Validate: %v, want one error %q", errs, tc.wantErr)
				}
				return
			}
			if len(errs) > 0 || !tc.check(o) {
				t.Errorf("options %+v, Validate %v", o, errs)
			}
		})
	}
}

// TestKubeletPluginSubcommand: the extender binary serves the plugin as
// `extender kubelet-plugin`, with its own flags. (Not executed here: the
// logging configuration applies once per process, and
// TestCommandRejectsInvalidOptions applies it.)
func TestKubeletPluginSubcommand(t *testing.T) {
	cmd, _, err := NewCommand(context.Background()).Find([]string{"kubelet-plugin"})
	if err != nil || cmd.Name() != "kubelet-plugin" || cmd.RunE == nil {
		t.Fatalf("extender kubelet-plugin: %v, %v", cmd, err)
	}
	for _, f := range []string{"kubeconfig", "node-name", "kubelet-registry-dir", "plugin-dir", "health-port", "v"} {
		if cmd.Flags().Lookup(f) == nil {
			t.Errorf("extender kubelet-plugin has no --%s", f)
		}
	}
	if cmd.Flags().Lookup("publish-devices") != nil {
		t.Error("extender kubelet-plugin takes the extender's own flags")
	}
}
