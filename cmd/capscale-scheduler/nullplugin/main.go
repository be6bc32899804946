// Command nullplugin is capscale-scheduler with two more plugins, for
// benchmarks only, never deployed. NullPlugin runs at the UnderlayIP
// plugin's extension points and does nothing: the framework's own price for
// one more PreFilter, Filter, PreScore and Score plugin, which no plugin can
// go below (benche2e's --mode plugin-floor; BENCHMARKS.md "Plugin mode, 5000
// nodes"). UnderlayIPDirect is UnderlayIP without its capacity memo
// (--mode plugin-memo).
package main

import (
	"context"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/capscale/capscale/schedplugin"
)

// Name is the null plugin's name in a KubeSchedulerConfiguration.
const Name = "NullPlugin"

type null struct{}

var (
	_ fwk.PreFilterPlugin = null{}
	_ fwk.FilterPlugin    = null{}
	_ fwk.PreScorePlugin  = null{}
	_ fwk.ScorePlugin     = null{}
	_ fwk.SignPlugin      = null{}
)

func (null) Name() string { return Name }

func (null) PreFilter(context.Context, fwk.CycleState, *v1.Pod, []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	return nil, nil
}

func (null) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

func (null) Filter(context.Context, fwk.CycleState, *v1.Pod, fwk.NodeInfo) *fwk.Status { return nil }

func (null) PreScore(context.Context, fwk.CycleState, *v1.Pod, []fwk.NodeInfo) *fwk.Status {
	return nil
}

func (null) Score(context.Context, fwk.CycleState, *v1.Pod, fwk.NodeInfo) (int64, *fwk.Status) {
	return 0, nil
}

// ScoreExtensions returns nil: UnderlayIP normalises, but a constant score
// needs none, and the framework then skips the call.
func (null) ScoreExtensions() fwk.ScoreExtensions { return nil }

// SignPod keeps the profile batchable, as UnderlayIP does.
func (null) SignPod(context.Context, *v1.Pod) ([]fwk.SignFragment, *fwk.Status) { return nil, nil }

// DirectName is the name of UnderlayIP without its capacity memo
// (benche2e's --mode plugin-memo).
const DirectName = schedplugin.Name + "Direct"

// direct is UnderlayIP without the memo, under its own name.
type direct struct{ *schedplugin.Plugin }

func (direct) Name() string { return DirectName }

// ScoreExtensions is the plugin's own NormalizeScore.
func (d direct) ScoreExtensions() fwk.ScoreExtensions { return d.Plugin }

func newDirect(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	pl, err := schedplugin.NewWithoutMemo(ctx, obj, h)
	if err != nil {
		return nil, err
	}
	return direct{pl.(*schedplugin.Plugin)}, nil
}

func main() {
	cmd := app.NewSchedulerCommand(
		app.WithPlugin(schedplugin.Name, schedplugin.New),
		app.WithPlugin(Name, func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return null{}, nil }),
		app.WithPlugin(DirectName, newDirect),
	)
	os.Exit(cli.Run(cmd))
}
