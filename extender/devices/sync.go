package devices

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/extender/publisher"
	"github.com/capscale/capscale/internal/kube"
)

// sync makes node's pool what Names says.
func (p *Publisher) sync(ctx context.Context, name string) error {
	have, err := p.poolSlices(name)
	if err != nil {
		return err
	}
	node, err := p.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		// The node is gone: so are its IPs.
		p.unserved.forget(name)
		for _, s := range have {
			if err := p.write(ctx, name, Change{Delete: s}); err != nil {
				return err
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting node %s from the informer: %w", name, err)
	}
	d := publisher.Decide(node, p.o.Rule, publisher.Use{InUse: p.o.InUse(name), Drawn: p.o.Drawn(name), Unlisted: p.o.Unlisted(name)})
	budget := d.Want
	if d.Invalid != "" {
		// Nothing new fits; what runs keeps its claims (Names publishes
		// no free device, and none at all while claims hold any: a slice's
		// change deallocates no claim).
		budget = 0
	}
	served, err := p.served(name)
	if err != nil {
		return err
	}
	if !served {
		// No kubelet plugin to prepare a claim there: as an invalid node,
		// nothing new fits and what runs keeps its claims.
		budget = 0
	}
	allocated, err := p.allocated(name)
	if err != nil {
		return err
	}
	devices := Names(budget, allocated)
	skip := p.o.SkipNodeOperations && !p.skipDropped.Load() && slices.Contains(node.Status.DeclaredFeatures, OptionalNodeOperationsFeature)
	for _, c := range Changes(name, node.UID, have, devices, skip) {
		if err := p.write(ctx, name, c); err != nil {
			return err
		}
	}
	return nil
}

// served reports whether node's kubelet plugin is Ready (always, without
// PluginSelector), and keeps the unserved set and its log.
func (p *Publisher) served(node string) (bool, error) {
	if p.plugins == nil {
		return true, nil
	}
	objs, err := p.plugins.GetIndexer().ByIndex(byNode, node)
	if err != nil {
		return false, fmt.Errorf("listing the kubelet plugin's pods on node %s: %w", node, err)
	}
	pods := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		if q, ok := o.(*v1.Pod); ok {
			pods = append(pods, q)
		}
	}
	ok := Served(pods)
	p.unserved.set(node, !ok)
	return ok, nil
}

// write makes one change of node's pool.
func (p *Publisher) write(ctx context.Context, node string, c Change) error {
	api := p.client.ResourceV1().ResourceSlices()
	opts := metav1.CreateOptions{FieldManager: FieldManager}
	var verb string
	var err error
	switch {
	case c.Create != nil:
		verb = "create"
		var got *resourcev1.ResourceSlice
		got, err = api.Create(ctx, c.Create, opts)
		p.checkSkipKept(c.Create, got)
	case c.Update != nil:
		verb = "update"
		var got *resourcev1.ResourceSlice
		got, err = api.Update(ctx, c.Update, metav1.UpdateOptions{FieldManager: FieldManager})
		p.checkSkipKept(c.Update, got)
	case c.Delete != nil:
		verb = "delete"
		err = api.Delete(ctx, c.Delete.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &c.Delete.UID}})
		if apierrors.IsNotFound(err) {
			err = nil
		}
	default:
		return nil
	}
	if err != nil {
		p.writes.WithLabelValues(verb, "error").Inc()
		return fmt.Errorf("%s of node %s's ResourceSlice: %w", verb, node, err)
	}
	p.writes.WithLabelValues(verb, "ok").Inc()
	if c.Update != nil || c.Create != nil {
		s := c.Update
		if s == nil {
			s = c.Create
		}
		klog.V(2).InfoS("Published underlay-IP devices", "node", klog.KRef("", node), "slice", s.Name, "generation", s.Spec.Pool.Generation, "devices", len(s.Spec.Devices))
	}
	return nil
}

// checkSkipKept notes an apiserver that dropped spec.skipNodeOperations
// (its DRAOptionalNodeOperations gate is off): the publisher stops asking
// for it, or every write would differ from what it reads back and be made
// again.
func (p *Publisher) checkSkipKept(sent, got *resourcev1.ResourceSlice) {
	if got == nil || len(sent.Spec.SkipNodeOperations) == 0 || len(got.Spec.SkipNodeOperations) > 0 {
		return
	}
	if p.skipDropped.CompareAndSwap(false, true) {
		klog.ErrorS(nil, "kube-apiserver drops ResourceSlice spec.skipNodeOperations (DRAOptionalNodeOperations off there): publishing without it, so kubelets will call a kubelet plugin of "+Driver, "slice", sent.Name)
	}
}

// poolSlices are the slices of node's pool in the cache.
func (p *Publisher) poolSlices(node string) ([]*resourcev1.ResourceSlice, error) {
	objs, err := p.slices.GetIndexer().ByIndex(byPool, node)
	if err != nil {
		return nil, fmt.Errorf("listing node %s's ResourceSlices: %w", node, err)
	}
	out := make([]*resourcev1.ResourceSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*resourcev1.ResourceSlice); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// allocated are the devices of node's pool that claims hold.
func (p *Publisher) allocated(node string) ([]string, error) {
	objs, err := p.claims.GetIndexer().ByIndex(byPool, node)
	if err != nil {
		return nil, fmt.Errorf("listing the claims on node %s: %w", node, err)
	}
	var out []string
	for _, o := range objs {
		if c, ok := o.(*resourcev1.ResourceClaim); ok {
			out = append(out, Allocated(c)[node]...)
		}
	}
	return out, nil
}

// slicePool indexes a slice of Driver by its pool.
func slicePool(obj any) ([]string, error) {
	s, ok := obj.(*resourcev1.ResourceSlice)
	if !ok || s.Spec.Driver != Driver {
		return nil, nil
	}
	return []string{s.Spec.Pool.Name}, nil
}

// claimPools indexes a claim by the pools of Driver it holds devices of.
func claimPools(obj any) ([]string, error) {
	c, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		return nil, nil
	}
	a := Allocated(c)
	out := make([]string, 0, len(a))
	for pool := range a {
		out = append(out, pool)
	}
	return out, nil
}

// compactClaim keeps of a claim what the publisher reads: its identity and
// the allocation results of Driver. A claim of another driver is cached
// as its name only.
func compactClaim(obj any) (any, error) {
	c, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		return obj, nil
	}
	out := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Name: c.Name, Namespace: c.Namespace, UID: c.UID, ResourceVersion: c.ResourceVersion,
	}}
	if c.Status.Allocation == nil {
		return out, nil
	}
	var results []resourcev1.DeviceRequestAllocationResult
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == Driver {
			results = append(results, resourcev1.DeviceRequestAllocationResult{Driver: r.Driver, Pool: r.Pool, Device: r.Device})
		}
	}
	if results != nil {
		out.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: results}}
	}
	return out, nil
}

// poolHandler queues the pools an object touches, before and after a change.
func poolHandler(enqueue func(string), pools cache.IndexFunc) cache.ResourceEventHandlerFuncs {
	each := func(obj any) {
		ps, _ := pools(obj)
		for _, p := range ps {
			enqueue(p)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: each,
		UpdateFunc: func(old, cur any) {
			each(old)
			each(cur)
		},
		DeleteFunc: func(obj any) { each(kube.Deleted(obj)) },
	}
}
