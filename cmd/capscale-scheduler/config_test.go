package main

import (
	"context"
	"slices"
	"testing"

	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/capscale/capscale/schedplugin"
)

// TestPostFilterBeforePreemption: kube-scheduler's own setup, given the
// configuration deploy/ ships, runs UnderlayIP's PostFilter before
// DefaultPreemption, and its Bind before DefaultBinder, in every profile. After it, preemption would already
// have evicted a victim for IPs that come back by themselves
// (schedplugin/postfilter.go). deploy/'s tests keep the second-scheduler
// manifest and the chart equal to this file.
func TestPostFilterBeforePreemption(t *testing.T) {
	opts := options.NewOptions()
	opts.ConfigFile = "../../deploy/plugin/kube-scheduler-config.yaml"
	// An apiserver that is never dialled (Setup builds the profiles, only
	// Run connects) and no serving port.
	opts.Master = "https://127.0.0.1:1"
	opts.SecureServing.BindPort = 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, sched, err := app.Setup(ctx, opts, app.WithPlugin(schedplugin.Name, schedplugin.New))
	if err != nil {
		t.Fatal(err)
	}
	if len(sched.Profiles) == 0 {
		t.Fatal("no profiles")
	}
	for name, prof := range sched.Profiles {
		var order []string
		for _, p := range prof.ListPlugins().PostFilter.Enabled {
			order = append(order, p.Name)
		}
		ours, preempt := slices.Index(order, schedplugin.Name), slices.Index(order, "DefaultPreemption")
		if ours < 0 || preempt < 0 || ours > preempt {
			t.Errorf("profile %s: PostFilter plugins %v; want %s before DefaultPreemption", name, order, schedplugin.Name)
		}
		// The check at bind runs only ahead of the binder that binds.
		order = order[:0]
		for _, p := range prof.ListPlugins().Bind.Enabled {
			order = append(order, p.Name)
		}
		ours, binder := slices.Index(order, schedplugin.Name), slices.Index(order, "DefaultBinder")
		if ours < 0 || binder < 0 || ours > binder {
			t.Errorf("profile %s: Bind plugins %v; want %s before DefaultBinder", name, order, schedplugin.Name)
		}
	}
}
