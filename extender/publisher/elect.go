package publisher

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// LeaseName is the Lease the publishers of one cluster elect a leader on.
const LeaseName = "capscale-capacity-publisher"

// RunElected runs run while this process holds the Lease namespace/LeaseName
// as identity, and campaigns again after losing it, until ctx is done; run
// must therefore be callable once per term (Publisher.Run is).
// client-go's usual timings (15s/10s/2s): a new leader takes over within
// about 15 s of the old one's death, at once after a clean shutdown.
func RunElected(ctx context.Context, client kubernetes.Interface, namespace, identity string, run func(context.Context)) error {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, LeaseName,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return fmt.Errorf("creating the publisher's lease lock %s/%s: %w", namespace, LeaseName, err)
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   15 * time.Second,
			RenewDeadline:   10 * time.Second,
			RetryPeriod:     2 * time.Second,
			ReleaseOnCancel: true,
			Name:            LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: run,
				OnStoppedLeading: func() { klog.InfoS("Capacity publisher lost or left its lease", "identity", identity) },
				OnNewLeader: func(id string) {
					if id != identity {
						klog.InfoS("Another capacity publisher leads", "leader", id)
					}
				},
			},
		})
	}
	return nil
}
