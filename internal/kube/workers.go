package kube

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// RunWorkers runs n copies of worker until ctx ends, then shuts the queue
// down (so that workers blocked on Get return) and waits for all of them:
// a controller's Run returns only once nothing of it is still running.
func RunWorkers(ctx context.Context, n int, worker func(context.Context), queue interface{ ShutDown() }) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { wait.UntilWithContext(ctx, worker, time.Second) })
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
}
