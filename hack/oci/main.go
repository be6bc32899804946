// Command oci builds capscale's container image and serves a registry, with
// no container engine: go-containerregistry (github.com/google/go-containerregistry)
// writes the image from the Go binaries as an OCI image layout and pushes it,
// and its pkg/registry is the local registry the tests push to.
//
//	oci image    --bin-dir DIR --out DIR [--platforms linux/amd64,linux/arm64] [--push REPO]
//	oci push     --layout DIR --repo REGISTRY/REPO [--tag TAG]
//	oci registry --addr 127.0.0.1:5000 [--dir DIR]
//
// Its own module, so that go-containerregistry stays out of capscale's
// go.mod (make image and make release run it with go run).
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: oci image|push|registry [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "image":
		err = imageCommand(os.Args[2:])
	case "push":
		err = pushCommand(os.Args[2:])
	case "registry":
		err = registryCommand(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: image, push or registry", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "oci "+os.Args[1]+":", err)
		os.Exit(1)
	}
}
