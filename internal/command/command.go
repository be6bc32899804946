// Package command is the one recipe every capscale binary runs: logging
// first, then flag validation, then Options → Config → Run.
package command

import (
	"context"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// Runner is a binary's Config: everything built, ready to serve.
type Runner interface {
	Run(ctx context.Context) error
}

// Wire adds fss to cmd and makes cmd run, until ctx ends: apply logs,
// print the flags (at V(1)), validate (all errors at once), build the
// Config, Run it.
func Wire[C Runner](ctx context.Context, cmd *cobra.Command, logs *logsapi.LoggingConfiguration, fss cliflag.NamedFlagSets, validate func() []error, config func() (C, error)) *cobra.Command {
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		// Logging first, so that everything after logs the configured way.
		if err := logsapi.ValidateAndApply(logs, nil); err != nil {
			return err
		}
		cliflag.PrintFlags(cmd.Flags())
		if errs := validate(); len(errs) > 0 {
			return utilerrors.NewAggregate(errs)
		}
		c, err := config()
		if err != nil {
			return err
		}
		return c.Run(ctx)
	}
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cliflag.SetUsageAndHelpFunc(cmd, fss, 80)
	return cmd
}
