package kube

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// ProcessNext takes one key off queue and syncs it, as a controller's
// worker does: a sync that fails is retried with the queue's backoff (and
// logged as failed, the key under name), one that asks to be looked at
// again after a while is queued for then, and either way the backoff is
// forgotten when it succeeded. It returns false once the queue is shut
// down.
func ProcessNext[K comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[K], sync func(context.Context, K) (after time.Duration, err error), failed, name string) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	after, err := sync(ctx, key)
	if err != nil {
		klog.ErrorS(err, failed, name, key)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	if after > 0 {
		queue.AddAfter(key, after)
	}
	return true
}
