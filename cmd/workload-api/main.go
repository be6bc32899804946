// Command workload-api serves capscale's workload lifecycle API.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/component-base/cli"

	"github.com/capscale/capscale/cmd/workload-api/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := cli.Run(app.NewCommand(ctx))
	stop()
	os.Exit(code)
}
