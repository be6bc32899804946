// Package kubectl is kubectl-capscale, the kubectl plugin: `kubectl
// capscale ips` shows where the cluster's underlay IPs are
// (internal/ipreport), and stop, start, restart, scale and max act on a
// Deployment or StatefulSet through workload/lifecycle, the code the
// workload API runs. Everything goes to the apiserver as the kubectl user
// (kubeconfig, context, --as), so RBAC, admission and audit see that person;
// no capscale server is involved.
package kubectl

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/capscale/capscale/internal/version"
)

// session is what every command reads from the root flags: who the user
// is and where.
type session struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	// newClient, if not nil, replaces the kubeconfig's client (tests).
	newClient func() (kubernetes.Interface, error)
}

func (s *session) client() (kubernetes.Interface, error) {
	if s.newClient != nil {
		return s.newClient()
	}
	cfg, err := s.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

func (s *session) namespace() (string, error) {
	ns, _, err := s.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// NewCommand is `kubectl capscale` with its subcommands.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return newCommand(&session{flags: genericclioptions.NewConfigFlags(true).WithWarningPrinter(streams), streams: streams})
}

func newCommand(s *session) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-capscale",
		Short: "Underlay IPs and workload lifecycle, as the kubectl user",
		Long: `kubectl capscale shows where the cluster's underlay IPs are and stops, starts,
restarts and scales workloads the way capscale's workload API does, acting as
you: your kubeconfig, context and --as decide what you may do.`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		// kubectl runs a plugin as kubectl-capscale; its usage reads
		// "kubectl capscale".
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl capscale"},
	}
	s.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(newIPsCommand(s))
	root.AddCommand(newAutoscalerCommand(s))
	root.AddCommand(newCheckCommand(s))
	for _, c := range newVerbCommands(s) {
		root.AddCommand(c)
	}
	return root
}

// Execute runs the command line args and returns the error to print.
func Execute(ctx context.Context, streams genericiooptions.IOStreams, args []string) error {
	return execute(ctx, NewCommand(streams), streams, args)
}

func execute(ctx context.Context, cmd *cobra.Command, streams genericiooptions.IOStreams, args []string) error {
	cmd.SetArgs(args)
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	return cmd.ExecuteContext(ctx)
}
