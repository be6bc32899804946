//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/extender/devices"
	"github.com/capscale/capscale/internal/names"
)

// capacityAnswer is what the subtests read of the workload API's
// GET .../capacity (workload.CapacityResponse).
type capacityAnswer struct {
	CurrentReplicas int32 `json:"currentReplicas"`
	Capacity        struct {
		Replicas         int64  `json:"replicas"`
		LimitingResource string `json:"limitingResource"`
	} `json:"capacity"`
}

// What reads capacity in DRA mode reads the same numbers as the devices
// kube-scheduler allocates. kubectl capscale ips is TestDRAMode/burst's; the
// workload API's maximum and the extender's gauges are these subtests'. All
// three count a node's IPs in use from its pods' requests, not from the
// claims (docs/dra.md says why); these subtests hold them to the devices.

// freeDevices is the devices published over all nodes less those that
// claims hold: what kube-scheduler can still allocate.
func freeDevices(ctx context.Context, s *stack.Stack) (int, error) {
	list, err := s.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + devices.Driver})
	if err != nil {
		return 0, err
	}
	published := 0
	for _, sl := range list.Items {
		published += len(sl.Spec.Devices)
	}
	claimed, err := claimedPerNode(ctx, s)
	if err != nil {
		return 0, err
	}
	for _, n := range claimed {
		published -= n
	}
	return published, nil
}

const draMaxNS = "dra-max"

// draWorkloadMax: the workload API's answer for a Deployment of one-IP
// pods, as its caller: how many more fit is the free devices; scaled
// through the API to that maximum, every pod is bound and the answer is 0,
// limited by the IPs; one more waits. The Deployment stays for
// draMetrics.
func draWorkloadMax(ctx context.Context, t *testing.T, s *stack.Stack, total int) {
	if err := s.WaitForNamespace(ctx, draMaxNS); err != nil {
		t.Fatal(err)
	}
	hc, err := s.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.ServiceAccountToken(ctx, draMaxNS, "console")
	if err != nil {
		t.Fatal(err)
	}
	bind(ctx, t, s, draMaxNS, "console-edit", "ClusterRole", "edit", "console")
	api := &apiClient{t: t, s: s, http: hc, token: tok}
	if _, err := s.Client.AppsV1().Deployments(draMaxNS).Create(ctx, SimpleDeployment(draMaxNS, "web", 1, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBoundCount(ctx, t, s, draMaxNS, 1)
	path := "/v1/namespaces/" + draMaxNS + "/deployments/web"

	// The API's informers and the publisher follow the pod a moment later:
	// poll until the answer and the devices agree.
	var got capacityAnswer
	var free int
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if free, err = freeDevices(ctx, s); err != nil {
			return false, nil
		}
		return api.do(ctx, http.MethodGet, path+"/capacity", nil, &got) == http.StatusOK && got.Capacity.Replicas == int64(free), nil
	})
	if err != nil || free != total-1 {
		t.Fatalf("the workload API says %d more replicas fit, %d devices are free (want %d): %v", got.Capacity.Replicas, free, total-1, err)
	}
	maximum := got.CurrentReplicas + int32(got.Capacity.Replicas)
	if code := api.do(ctx, http.MethodPut, path+"/scale", map[string]int32{"replicas": maximum}, nil); code != http.StatusOK {
		t.Fatalf("scale to %d: %d", maximum, code)
	}
	waitBoundCount(ctx, t, s, draMaxNS, int(maximum))
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return api.do(ctx, http.MethodGet, path+"/capacity", nil, &got) == http.StatusOK && got.Capacity.Replicas == 0, nil
	})
	if err != nil || got.Capacity.LimitingResource != names.UnderlayIPResource {
		t.Errorf("at the maximum the API says %d more fit, limited by %q; want 0, by %s: %v", got.Capacity.Replicas, got.Capacity.LimitingResource, names.UnderlayIPResource, err)
	}
	if free, err := freeDevices(ctx, s); err != nil || free != 0 {
		t.Errorf("at the API's maximum, %d devices are free (%v), want 0", free, err)
	}
	if code := api.do(ctx, http.MethodPut, path+"/scale", map[string]int32{"replicas": maximum + 1}, nil); code != http.StatusOK {
		t.Fatalf("scale to %d: %d", maximum+1, code)
	}
	stayBoundPending(ctx, t, s, draMaxNS, int(maximum), 1, time.Second)
}

// draMetrics: with draWorkloadMax's Deployment at the maximum, the
// extender's gauges say what the devices say: capacity is every node's
// budget, IPs used are what the claims hold, devices published are the
// budgets. Then the Deployment goes.
func draMetrics(ctx context.Context, t *testing.T, s *stack.Stack, total int) {
	defer func() {
		if err := s.Client.AppsV1().Deployments(draMaxNS).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitNoPodsNorClaims(ctx, t, s, draMaxNS)
	}()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		claimed, err := claimedPerNode(ctx, s)
		if err != nil {
			return false, nil
		}
		held := 0
		for _, n := range claimed {
			held += n
		}
		capacity := metricSum(ctx, t, s.ExtenderURL, "capscale_extender_capacity_ips")
		used := metricSum(ctx, t, s.ExtenderURL, "capscale_extender_used_ips")
		published := metricSum(ctx, t, s.ExtenderURL, "capscale_extender_published_devices")
		last = fmt.Sprintf("capacity_ips %v, used_ips %v, published_devices %v; budgets %d, claims hold %d", capacity, used, published, total, held)
		return held == total && capacity == float64(total) && used == float64(held) && published == float64(total), nil
	})
	if err != nil {
		t.Errorf("the extender's gauges and the devices differ: %s: %v", last, err)
	}
	t.Log(last)
}
