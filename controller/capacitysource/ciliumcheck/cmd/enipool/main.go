// Command enipool grows every Node's ENI pool with cilium-operator's own
// ENI IPAM against Cilium's mock EC2 API (package enipool), until it is
// stopped. The end-to-end tests of Karpenter with a pool that grows run it
// against their plane.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capscale/capscale/controller/capacitysource/ciliumcheck/enipool"
)

func main() {
	// A flag set of its own: Cilium's packages register flags of theirs
	// (kubeconfig among them) on the global one.
	fs := flag.NewFlagSet("enipool", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "the apiserver's kubeconfig")
	preAllocate := fs.Int("pre-allocate", 8, "each agent's spec.ipam.pre-allocate")
	interval := fs.Duration("interval", 200*time.Millisecond, "how often Nodes and Pods are read")
	_ = fs.Parse(os.Args[1:])
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(log, *kubeconfig, *preAllocate, *interval); err != nil {
		log.Error("enipool", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, kubeconfig string, preAllocate int, interval time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	g, err := enipool.New(ctx, log, core, dyn, preAllocate)
	if err != nil {
		return err
	}
	log.Info("growing ENI pools", "instanceType", enipool.InstanceType, "preAllocate", preAllocate)
	return g.Run(ctx, interval)
}
