package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// registryCommand serves go-containerregistry's registry (OCI distribution,
// with the referrers API) over plain HTTP, for tests and the local plane:
// on loopback unless told otherwise, blobs on disk when --dir is given.
func registryCommand(args []string) error {
	fs := flag.NewFlagSet("registry", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:5000", "address to listen on")
	dir := fs.String("dir", "", "keep blobs in this directory (default: in memory)")
	quiet := fs.Bool("quiet", false, "do not log every request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: NewRegistry(*dir, *quiet), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("registry serving on http://%s\n", ln.Addr())
	go func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
		<-c
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// NewRegistry is the registry handler: referrers API on, blobs in dir or
// in memory.
func NewRegistry(dir string, quiet bool) http.Handler {
	opts := []registry.Option{registry.WithReferrersSupport(true)}
	if dir != "" {
		opts = append(opts, registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)))
	}
	if quiet {
		opts = append(opts, registry.Logger(log.New(io.Discard, "", 0)))
	}
	return registry.New(opts...)
}
