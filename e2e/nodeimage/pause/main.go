// Command pause is a real node's sandbox image (containerd's sandbox_image):
// it holds the pod's namespaces until it is asked to stop. As a container's
// PID 1 it gets no default signal handling, so it waits for SIGTERM or
// SIGINT itself.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
