// Command extender is capscale's kube-scheduler extender for underlay IP
// capacity. See package github.com/capscale/capscale/extender.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/component-base/cli"

	"github.com/capscale/capscale/cmd/extender/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := cli.Run(app.NewCommand(ctx))
	stop()
	os.Exit(code)
}
