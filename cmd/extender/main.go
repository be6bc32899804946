// Command extender is capscale's kube-scheduler extender for underlay IP
// capacity. See package github.com/capscale/capscale/extender.
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/capscale/capscale/cmd/extender/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand()))
}
