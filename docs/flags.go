package docs

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	logsapi "k8s.io/component-base/logs/api/v1"

	controller "github.com/capscale/capscale/cmd/controller/app"
	extender "github.com/capscale/capscale/cmd/extender/app"
	adapter "github.com/capscale/capscale/cmd/metrics-adapter/app"
	workloadapi "github.com/capscale/capscale/cmd/workload-api/app"
	"github.com/capscale/capscale/kubectl"
)

// Flag is one command-line flag as the binary defines it.
type Flag struct {
	// Set is the named flag set it belongs to ("extender", "native mode").
	Set  string
	Name string
	// Shorthand is the one-letter form, if any.
	Shorthand string
	// Default is pflag's DefValue: the default as --help prints it.
	Default    string
	Usage      string
	Deprecated string
}

// Binary is one binary's (or subcommand's) flags.
type Binary struct {
	Name  string
	Flags []Flag
}

// loggingFlags are the names component-base's logging adds; every binary
// has them, and the reference documents them in one line.
func loggingFlags() map[string]bool {
	fs := pflag.NewFlagSet("logging", pflag.ContinueOnError)
	logsapi.AddFlags(logsapi.NewLoggingConfiguration(), fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
	return names
}

// Binaries returns every binary's flags, from each cmd/<bin>/app's
// NewOptions().Flags(), leaving out the logging flags; and the flags of
// `extender release-cleanup`, `extender kubelet-plugin` and
// `metrics-adapter preflight`, from their
// cobra commands.
func Binaries() ([]Binary, error) {
	skip := loggingFlags()
	fromSets := func(name string, order []string, sets map[string]*pflag.FlagSet) Binary {
		b := Binary{Name: name}
		for _, set := range order {
			sets[set].VisitAll(func(f *pflag.Flag) {
				if skip[f.Name] {
					return
				}
				b.Flags = append(b.Flags, flagOf(set, f))
			})
		}
		return b
	}
	var out []Binary
	fss := extender.NewOptions().Flags()
	out = append(out, fromSets("extender", fss.Order, fss.FlagSets))
	cleanup, err := subcommand(extender.NewCommand(context.Background()), "extender", "release-cleanup", skip)
	if err != nil {
		return nil, err
	}
	out = append(out, cleanup)
	plugin, err := subcommand(extender.NewCommand(context.Background()), "extender", "kubelet-plugin", skip)
	if err != nil {
		return nil, err
	}
	out = append(out, plugin)
	fss = adapter.NewOptions().Flags()
	out = append(out, fromSets("metrics-adapter", fss.Order, fss.FlagSets))
	pre, err := subcommand(adapter.NewCommand(context.Background()), "metrics-adapter", "preflight", skip)
	if err != nil {
		return nil, err
	}
	out = append(out, pre)

	fss = workloadapi.NewOptions().Flags()
	out = append(out, fromSets("workload-api", fss.Order, fss.FlagSets))
	fss = controller.NewOptions().Flags()
	out = append(out, fromSets("controller", fss.Order, fss.FlagSets))
	return append(out, kubectlPlugin()...), nil
}

// subcommand is the flags of bin's subcommand name (its own, a
// Binary named bin-name), leaving out those in skip.
func subcommand(cmd *cobra.Command, bin, name string, skip map[string]bool) (Binary, error) {
	for _, c := range cmd.Commands() {
		if c.Name() != name {
			continue
		}
		b := Binary{Name: bin + "-" + name}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !skip[f.Name] {
				b.Flags = append(b.Flags, flagOf(name, f))
			}
		})
		return b, nil
	}
	return Binary{}, fmt.Errorf("%s has no %s subcommand", bin, name)
}

// kubectlPlugin is kubectl-capscale's own flags, one binary per subcommand
// ("kubectl-capscale-ips"); the kubeconfig flags (--context, --as, -n, ...)
// are cli-runtime's, as in kubectl itself.
func kubectlPlugin() []Binary {
	var out []Binary
	for _, c := range kubectl.NewCommand(genericiooptions.IOStreams{}).Commands() {
		b := Binary{Name: "kubectl-capscale-" + c.Name()}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				b.Flags = append(b.Flags, flagOf(c.Name(), f))
			}
		})
		if len(b.Flags) > 0 {
			out = append(out, b)
		}
	}
	return out
}

func flagOf(set string, f *pflag.Flag) Flag {
	return Flag{Set: set, Name: f.Name, Shorthand: f.Shorthand, Default: f.DefValue, Usage: f.Usage, Deprecated: f.Deprecated}
}

// FlagTable is the Markdown table of flags: one row per flag, with its
// name, its default as --help prints it, its flag set and its help text.
func FlagTable(flags []Flag) string {
	var b strings.Builder
	b.WriteString("| flag | default | set | meaning |\n|---|---|---|---|\n")
	for _, f := range flags {
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		usage := f.Usage
		if f.Deprecated != "" {
			usage = "Deprecated: " + f.Deprecated + " " + usage
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, code(f.Default), cell(f.Set), cell(usage))
	}
	return b.String()
}

// FlagName is the long name in a flag table row's first cell
// ("`-v`, `--v`" or "`--bind-address`" gives "v" or "bind-address").
func FlagName(first string) string {
	parts := strings.Split(first, ",")
	return strings.TrimPrefix(strings.Trim(strings.TrimSpace(parts[len(parts)-1]), "`"), "--")
}
