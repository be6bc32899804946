package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/capscale/capscale/e2e/loadsource"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/httpserver"
)

// demoAdapterConfig is the metrics adapter config local-up uses unless told
// otherwise: one source (the local load source) and a step policy for the
// demo's GPU Deployment, with short intervals so the demo moves in seconds.
const demoAdapterConfig = `sources:
- name: gpu-load
  url: %s
  jsonPath: '{.data.load_balance}'
  interval: 2s
  timeout: 1s
  maxAge: 1m
  tls: {caFile: %s}
stepPolicies:
- workload: {namespace: demo, kind: Deployment, name: gpu-inference}
  source: gpu-load
  scaleUpAbove: 0.8
  scaleDownBelow: 0.5
  stepUp: 3
  stepDown: 1
  minReplicas: 1
  maxReplicas: 20
  minPodAge: 20s
  interval: 10s
`

// startLoadSource runs `localplane load-source` detached, serving TLS with a
// certificate from the plane's CA, and writes the demo adapter config for it.
func startLoadSource(s *stack.Stack, binDir string) (url, configFile string, err error) {
	port, err := plane.FreePort()
	if err != nil {
		return "", "", err
	}
	cert, err := s.ServingCert("load-source", "localhost")
	if err != nil {
		return "", "", err
	}
	self, err := os.Executable()
	if err != nil {
		return "", "", err
	}
	proc, err := s.StartProcess("load-source", self, "load-source",
		fmt.Sprintf("--addr=127.0.0.1:%d", port), "--tls-cert-file="+cert.CertFile, "--tls-private-key-file="+cert.KeyFile)
	if err != nil {
		return "", "", err
	}
	url = fmt.Sprintf("https://127.0.0.1:%d/load", port)
	c, err := s.HTTPClient()
	if err != nil {
		return "", "", err
	}
	for i := 0; ; i++ {
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			break
		}
		if exited, err := proc.Exited(); exited || i > 100 {
			return "", "", fmt.Errorf("load source did not start (%v):\n%s", err, proc.Tail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	configFile = filepath.Join(s.Dir, "adapter-config.yaml")
	cfg := fmt.Sprintf(demoAdapterConfig, url, s.PKI.ClusterCA.CertFile)
	return url, configFile, os.WriteFile(configFile, []byte(cfg), 0o644)
}

// serveLoadSource is the `load-source` subcommand.
func serveLoadSource(args []string) error {
	fs := flag.NewFlagSet("load-source", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	value := fs.Float64("value", 0.3, "initial load index")
	certFile := fs.String("tls-cert-file", "", "serving certificate")
	keyFile := fs.String("tls-private-key-file", "", "serving key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	src := &loadsource.Source{}
	src.Set(*value)
	mux := http.NewServeMux()
	mux.Handle("/load", src)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	return httpserver.Serve(ctx, httpserver.Options{Addr: *addr, CertFile: *certFile, KeyFile: *keyFile}, mux, nil)
}
