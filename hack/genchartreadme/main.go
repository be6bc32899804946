// Command genchartreadme rewrites the values table of the chart's README
// from deploy/helm/capscale/values.yaml. Run it from the repository root:
// go run ./hack/genchartreadme
package main

import (
	"fmt"
	"os"

	"github.com/capscale/capscale/hack/chartreadme"
)

func main() {
	changed, err := chartreadme.Update(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "genchartreadme:", err)
		os.Exit(1)
	}
	if changed {
		fmt.Println("updated", chartreadme.ReadmePath)
	}
}
