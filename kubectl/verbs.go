package kubectl

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/capscale/capscale/internal/underlay"
	"github.com/capscale/capscale/workload/capacity"
	"github.com/capscale/capscale/workload/lifecycle"
)

// verb is one lifecycle command: what it may act on and what it does.
type verb struct {
	use, short, long string
	kinds            []lifecycle.Kind
	// run acts on t with c and returns the outcome and the line to print.
	run func(ctx context.Context, c kubernetes.Interface, t lifecycle.Target, o *verbOptions) (any, string, error)
	// flags adds the verb's own flags.
	flags func(cmd *cobra.Command, o *verbOptions)
}

type verbOptions struct {
	output          string
	replicas        int32
	adjustHPA       bool
	dryRun          bool
	defaultCapacity int64
	// replicasSet is whether --replicas was given.
	replicasSet bool
	// warn prints a warning line.
	warn func(string)
}

func newVerbCommands(s *session) []*cobra.Command {
	verbs := []verb{
		{use: "stop", short: "Scale a workload to 0, remembering its replicas for start", kinds: lifecycle.Scalable, run: runStop,
			long: "stop writes the current replica count into the capscale.io/replicas-before-stop annotation and\nscales to 0 in one update. It refuses when an HPA with minReplicas 0 would scale it back up."},
		{use: "start", short: "Scale a stopped workload back to its remembered replicas", kinds: lifecycle.Scalable, run: runStart, flags: replicasFlag(false),
			long: "start restores the count stop remembered (or --replicas), never above the HPA's maxReplicas."},
		{use: "restart", short: "Roll a workload's pods, as kubectl rollout restart does", kinds: lifecycle.Restartable, run: runRestart},
		{use: "scale", short: "Set a workload's replicas, HPA-aware, with how many more fit", kinds: lifecycle.Scalable, run: runScale, flags: scaleFlags,
			long: "scale writes the scale subresource. An HPA managing the workload makes it a refusal unless\n--adjust-hpa widens the HPA's bounds to include the new count."},
		{use: "max", short: "Scale a workload to the most replicas the cluster can place", kinds: lifecycle.Scalable, run: runMax, flags: maxFlags,
			long: "max computes, from the Nodes and Pods you can list, how many more replicas of the workload fit\n(CPU, memory, pods and underlay IPs, bin-packed per node) and scales to the current count plus those."},
	}
	out := make([]*cobra.Command, 0, len(verbs))
	for _, v := range verbs {
		out = append(out, v.command(s))
	}
	return out
}

func (v verb) command(s *session) *cobra.Command {
	o := &verbOptions{}
	resources := make([]string, len(v.kinds))
	for i, k := range v.kinds {
		resources[i] = k.Resource()
	}
	cmd := &cobra.Command{
		Use:               v.use + " (TYPE/NAME | TYPE NAME)",
		Short:             v.short,
		Long:              strings.TrimSpace(v.short + ".\n\n" + v.long + "\n\nTYPE is one of " + strings.Join(resources, ", ") + " (or " + strings.Join(shortNamesOf(v.kinds), ", ") + ")."),
		Example:           fmt.Sprintf("  kubectl capscale %s deployment/web -n shop", v.use),
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: s.completeWorkloads(v.kinds),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.replicasSet = cmd.Flags().Changed("replicas")
			o.warn = func(w string) { fmt.Fprintf(s.streams.ErrOut, "Warning: %s\n", w) }
			if err := checkFormat(o.output, outcomeFormats); err != nil {
				return err
			}
			if o.defaultCapacity < 0 || o.defaultCapacity > underlay.MaxCapacity {
				return fmt.Errorf("--default-capacity must be within 0..%d, got %d", underlay.MaxCapacity, o.defaultCapacity)
			}
			ns, err := s.namespace()
			if err != nil {
				return err
			}
			t, err := parseWorkload(args, v.kinds, ns)
			if err != nil {
				return err
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			outcome, line, err := v.run(cmd.Context(), c, t, o)
			if err != nil {
				return explain(err, v.use, o.adjustHPA)
			}
			if done, err := printData(s.streams.Out, outcome, o.output); done {
				return err
			}
			_, err = fmt.Fprintln(s.streams.Out, line)
			return err
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: json or yaml (default: one line)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outcomeFormats, cobra.ShellCompDirectiveNoFileComp))
	if v.flags != nil {
		v.flags(cmd, o)
	}
	return cmd
}

func replicasFlag(required bool) func(*cobra.Command, *verbOptions) {
	return func(cmd *cobra.Command, o *verbOptions) {
		help := "replicas to start with instead of the remembered count"
		if required {
			help = "the new replica count"
		}
		cmd.Flags().Int32Var(&o.replicas, "replicas", 0, help)
		if required {
			_ = cmd.MarkFlagRequired("replicas")
		}
	}
}

func scaleFlags(cmd *cobra.Command, o *verbOptions) {
	replicasFlag(true)(cmd, o)
	cmd.Flags().BoolVar(&o.adjustHPA, "adjust-hpa", false, "widen the bounds of the workload's HPA to include the new count")
}

func maxFlags(cmd *cobra.Command, o *verbOptions) {
	cmd.Flags().BoolVar(&o.adjustHPA, "adjust-hpa", false, "widen the bounds of the workload's HPA to include the new count")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "print the computed maximum and change nothing")
	cmd.Flags().Int64Var(&o.defaultCapacity, "default-capacity", capacity.DefaultUnderlayIPCapacity,
		underlay.DefaultCapacityText+": the --default-capacity your capscale components run with")
}

// name is how kubectl names a workload: deployment.apps/web.
func name(t lifecycle.Target) string {
	return strings.ToLower(t.Kind.Kind()) + ".apps/" + t.Name
}

func runStop(ctx context.Context, c kubernetes.Interface, t lifecycle.Target, _ *verbOptions) (any, string, error) {
	out, err := lifecycle.Stop(ctx, c, t)
	return out, fmt.Sprintf("%s %s", name(t), out.Message), err
}

func runStart(ctx context.Context, c kubernetes.Interface, t lifecycle.Target, o *verbOptions) (any, string, error) {
	var replicas *int32
	if o.replicasSet {
		replicas = &o.replicas
	}
	out, err := lifecycle.Start(ctx, c, t, replicas)
	return out, fmt.Sprintf("%s %s", name(t), out.Message), err
}

func runRestart(ctx context.Context, c kubernetes.Interface, t lifecycle.Target, _ *verbOptions) (any, string, error) {
	out, err := lifecycle.Restart(ctx, c, t, (&lifecycle.Stamper{}).Next())
	return out, fmt.Sprintf("%s restarted (restartedAt %s)", name(t), out.RestartedAt), err
}

func runScale(ctx context.Context, c kubernetes.Interface, t lifecycle.Target, o *verbOptions) (any, string, error) {
	// No capacity here: it would list every pod of the cluster for each
	// scale. max --dry-run says how many fit.
	out, err := lifecycle.Scale(ctx, c, t, o.replicas, lifecycle.ScaleOptions{AdjustHPA: o.adjustHPA})
	return out, scaledLine(t, out, o), err
}

func runMax(ctx context.Context, c kubernetes.Interface, t lifecycle.Target, o *verbOptions) (any, string, error) {
	capacityOf := userCapacity(c, t, o.defaultCapacity)
	if o.dryRun {
		res, err := capacityOf(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("computing the maximum of %s: %w", t, err)
		}
		w, err := t.Kind.Get(ctx, c, t.Namespace, t.Name)
		if err != nil {
			return nil, "", fmt.Errorf("reading %s: %w", t, err)
		}
		current := lifecycle.ReplicasOf(*w.Replicas)
		n := lifecycle.MaxReplicas(current, res)
		return res, fmt.Sprintf("%s can run %d replicas (now %d): %s (dry run: nothing changed)", name(t), n, current, res.Reason), nil
	}
	out, err := lifecycle.Max(ctx, c, t, lifecycle.ScaleOptions{AdjustHPA: o.adjustHPA, Capacity: capacityOf})
	return out, scaledLine(t, out, o), err
}

func scaledLine(t lifecycle.Target, out lifecycle.Scaled, o *verbOptions) string {
	for _, w := range out.Warnings {
		o.warn(w)
	}
	line := fmt.Sprintf("%s scaled from %d to %d", name(t), out.PreviousReplicas, out.Replicas)
	if out.Capacity != nil {
		line += fmt.Sprintf(" (before the scale: %s)", out.Capacity.Reason)
	}
	return line
}

// userCapacity computes how many more replicas of t fit from what the
// user can read: t's pod template, the nodes and the pods.
func userCapacity(c kubernetes.Interface, t lifecycle.Target, def int64) func(context.Context) (capacity.Result, error) {
	return func(ctx context.Context) (capacity.Result, error) {
		w, err := t.Kind.Get(ctx, c, t.Namespace, t.Name)
		if err != nil {
			return capacity.Result{}, fmt.Errorf("reading %s: %w", t, err)
		}
		nodes, pods, err := readCluster(ctx, c, "")
		if err != nil {
			return capacity.Result{}, err
		}
		return capacity.Compute(capacity.Input{Template: *w.Template, Nodes: nodes, Pods: pods, DefaultUnderlayIPCapacity: def}), nil
	}
}
