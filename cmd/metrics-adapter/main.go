// Command metrics-adapter serves capscale's external metrics
// (external.metrics.k8s.io) for HorizontalPodAutoscalers. See package
// github.com/capscale/capscale/metricsadapter.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"github.com/capscale/capscale/cmd/metrics-adapter/app"
)

func main() {
	// The apiserver's signal context: the first SIGTERM/SIGINT starts a
	// graceful shutdown, a second one exits at once.
	ctx := genericapiserver.SetupSignalContext()
	os.Exit(cli.Run(app.NewCommand(ctx)))
}
