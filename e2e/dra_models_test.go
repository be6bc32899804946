//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
)

// probeModels is the probe behind docs/design/dra-devices.md: the two ways
// a node's IPs could become devices, each behind its own DeviceClass with
// an extendedResourceName of its own (so the publisher's class is not
// touched), on node 0, a budget of 10 each, and what the plane's stock
// kube-scheduler v1.37.2 allocates for a pod asking 3 and for 11 pods
// asking 1.
//
//   - per IP: ten devices; 3 becomes three devices, and ten pods of one
//     fit, the eleventh does not.
//   - one multi-allocatable device with a consumable capacity "ips" of 10:
//     a pod asking 1 consumes the requestPolicy's default (1), but nine
//     or ten fit, never more; and a pod asking 3 stays Pending for good,
//     since the scheduler's claim asks for 3 devices (ExactCount 3, no
//     capacity request), and the allocator never takes one device twice
//     for one request.
func probeModels(ctx context.Context, t *testing.T, p *plane.Plane) {
	node := plane.NodeName(0)
	const ns = "dra-models"
	if err := p.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	one := resource.MustParse("1")
	models := []struct {
		name, resource string
		devices        []resourcev1.Device
		want3Bound     bool
	}{
		{name: "per-ip", resource: "capscale.io/probe-per-ip", want3Bound: true, devices: func() []resourcev1.Device {
			var ds []resourcev1.Device
			for i := range 10 {
				ds = append(ds, resourcev1.Device{Name: fmt.Sprintf("ip-%d", i)})
			}
			return ds
		}()},
		{name: "multi", resource: "capscale.io/probe-multi", want3Bound: false, devices: []resourcev1.Device{{
			Name:                     "ips",
			AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"ips": {
				Value: resource.MustParse("10"),
				RequestPolicy: &resourcev1.CapacityRequestPolicy{
					Default:    &one,
					ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: &one, Step: &one},
				},
			}},
		}}},
	}
	for _, m := range models {
		driver := m.name + ".probe.capscale.io"
		class := &resourcev1.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: m.name + ".probe.capscale.io"},
			Spec: resourcev1.DeviceClassSpec{
				ExtendedResourceName: ptr.To(m.resource),
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
					Expression: fmt.Sprintf("device.driver == %q", driver)}}},
			},
		}
		if _, err := p.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		slice := &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: m.name + "-" + node},
			Spec: resourcev1.ResourceSliceSpec{
				Driver: driver, NodeName: ptr.To(node),
				Pool:    resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
				Devices: m.devices,
			},
		}
		if _, err := p.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatalf("model %s: creating its ResourceSlice: %v", m.name, err)
		}
	}
	pod := func(name, res string, n int64) *corev1.Pod {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{corev1.LabelHostname: node},
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/capscale/fake:1",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceName(res): q}, Limits: corev1.ResourceList{corev1.ResourceName(res): q}}}},
			},
		}
	}
	for _, m := range models {
		t.Run(m.name, func(t *testing.T) {
			three := pod(m.name+"-three", m.resource, 3)
			if _, err := p.Client.CoreV1().Pods(ns).Create(ctx, three, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if m.want3Bound {
				claim := waitBoundClaim(ctx, t, p, ns, three.Name)
				if n := len(claim.Status.Allocation.Devices.Results); n != 3 {
					t.Fatalf("a pod asking 3 got %d devices: %+v", n, claim.Status.Allocation.Devices.Results)
				}
				t.Logf("%s: capscale.io/underlay-ip: 3 became claim %s with %d device results", m.name, claim.Name, len(claim.Status.Allocation.Devices.Results))
			} else {
				msg := waitFailedScheduling(ctx, t, p, ns, three.Name)
				t.Logf("%s: a pod asking 3 stays Pending: %s", m.name, msg)
			}
			if err := p.Client.CoreV1().Pods(ns).Delete(ctx, three.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			waitNoClaims(ctx, t, p, ns, three.Name)
			// Ten pods of one fit, the eleventh does not.
			for i := range 11 {
				if _, err := p.Client.CoreV1().Pods(ns).Create(ctx, pod(fmt.Sprintf("%s-one-%d", m.name, i), m.resource, 1), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var bound, pending int
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				pods, err := p.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, nil
				}
				bound, pending = 0, 0
				for _, po := range pods.Items {
					if !strings.HasPrefix(po.Name, m.name+"-one-") || po.DeletionTimestamp != nil {
						continue
					}
					if po.Spec.NodeName != "" {
						bound++
					} else if hasUnschedulable(po) {
						pending++
					}
				}
				if bound > 10 {
					return false, fmt.Errorf("%d pods of one IP bound on a budget of 10", bound)
				}
				if !m.want3Bound {
					// The multi-allocatable device admits 9 or 10 on
					// v1.37.2 (9 in 5 runs of 9): never more.
					return bound+pending == 11 && pending >= 1, nil
				}
				return bound == 10 && pending == 1, nil
			})
			t.Logf("%s: 11 pods of one IP on a budget of 10: %d bound, %d unschedulable", m.name, bound, pending)
			if err != nil {
				t.Fatalf("%s: want 10 bound and 1 unschedulable, have %d and %d: %v", m.name, bound, pending, err)
			}
			if err := p.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// hasUnschedulable reports whether kube-scheduler marked pod unschedulable.
func hasUnschedulable(pod corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// waitBoundClaim waits until pod is bound and returns its allocated
// extended-resource claim.
func waitBoundClaim(ctx context.Context, t *testing.T, p *plane.Plane, ns, pod string) *resourcev1.ResourceClaim {
	t.Helper()
	var claim *resourcev1.ResourceClaim
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		po, err := p.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil || po.Spec.NodeName == "" || po.Status.ExtendedResourceClaimStatus == nil {
			return false, nil
		}
		c, err := p.Client.ResourceV1().ResourceClaims(ns).Get(ctx, po.Status.ExtendedResourceClaimStatus.ResourceClaimName, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil {
			return false, nil
		}
		claim = c
		return true, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: no bound pod with an allocated claim: %v", ns, pod, err)
	}
	return claim
}

// waitFailedScheduling waits until pod is unschedulable and returns the
// condition's message.
func waitFailedScheduling(ctx context.Context, t *testing.T, p *plane.Plane, ns, pod string) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		po, err := p.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if po.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was bound to %s", pod, po.Spec.NodeName)
		}
		for _, c := range po.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				msg = c.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: %v", ns, pod, err)
	}
	return msg
}

// waitNoClaims waits until no ResourceClaim of ns is owned by a pod named pod.
func waitNoClaims(ctx context.Context, t *testing.T, p *plane.Plane, ns, pod string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		claims, err := p.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range claims.Items {
			for _, o := range c.OwnerReferences {
				if o.Name == pod {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("claims of pod %s/%s still there: %v", ns, pod, err)
	}
}
