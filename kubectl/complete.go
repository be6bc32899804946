package kubectl

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capscale/capscale/workload/lifecycle"
)

// Completion asks the apiserver, as the user, with a short deadline: a
// slow or refusing cluster gives no suggestions rather than a hung shell.
const completionTimeout = 3 * time.Second

func (s *session) completeNodes(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	c, err := s.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, n := range l.Items {
		if strings.HasPrefix(n.Name, prefix) {
			out = append(out, n.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeWorkloads suggests TYPE/NAME of the kinds a verb serves in the
// namespace.
func (s *session) completeWorkloads(kinds []lifecycle.Kind) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := s.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ns, err := s.namespace()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		var out []string
		for _, k := range kinds {
			names, err := k.List(ctx, c, ns)
			if err != nil {
				continue
			}
			for _, n := range names {
				if v := strings.TrimSuffix(k.Resource(), "s") + "/" + n; strings.HasPrefix(v, prefix) {
					out = append(out, v)
				}
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
