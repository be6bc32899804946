// Command capscale-scheduler is kube-scheduler v1.37 with capscale's
// UnderlayIP plugin compiled in (plugin mode, docs/plugin-mode.md). It
// takes kube-scheduler's flags and configuration file; a profile enables
// the plugin in its KubeSchedulerConfiguration.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json, as kube-scheduler has
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/capscale/capscale/schedplugin"
)

func main() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(schedplugin.Name, schedplugin.New))
	os.Exit(cli.Run(cmd))
}
