// Command controller is capscale-controller: capscale's controllers (today
// the ElasticWeb controller), leader-elected with a Lease.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/component-base/cli"

	"github.com/capscale/capscale/cmd/controller/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := cli.Run(app.NewCommand(ctx))
	stop()
	os.Exit(code)
}
