// Command metrics-adapter serves capscale's external metrics
// (external.metrics.k8s.io) for HorizontalPodAutoscalers. See package
// github.com/capscale/capscale/metricsadapter.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
	// Mozilla's roots, used only where the system has none (capscale's
	// image has no base and no /etc/ssl): the adapter polls load-index
	// sources that may be public HTTPS endpoints.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/capscale/capscale/cmd/metrics-adapter/app"
)

func main() {
	// The apiserver's signal context: the first SIGTERM/SIGINT starts a
	// graceful shutdown, a second one exits at once.
	ctx := genericapiserver.SetupSignalContext()
	os.Exit(cli.Run(app.NewCommand(ctx)))
}
