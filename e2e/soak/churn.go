package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/internal/names"
)

// Namespace holds the soak's workloads.
const Namespace = "soak"

// churn drives steady change: Deployments of underlay pods scaled up and
// down so that demand sits near capacity, bare underlay pods created and
// deleted, plain pods scaled, nodes deleted and added back, and capacity
// annotations changed (to invalid values and 0 too).
type churn struct {
	c   kubernetes.Interface
	rng *rand.Rand
	// ipDeployments are the underlay Deployments; capacity the cluster's
	// IPs when the churn began, which their sizes move around.
	ipDeployments []string
	capacity      int64
	nodes         []string
	logf          func(string, ...any)
	// maxStep, when not 0, is the most replicas one scale moves a
	// Deployment by (see stepFor).
	maxStep int32
	// scheduler is the underlay pods' schedulerName (see schedulerFor).
	scheduler string

	mu   sync.Mutex
	bare []string
	seq  int
	// set is each underlay Deployment's replicas as the churn last set them;
	// target where a paced walk is heading.
	set, target map[string]int32
	// Errors counts churn calls the apiserver refused (during its restart,
	// mostly); they are logged, not fatal.
	Errors int
}

func deployment(name string, replicas int32, ips int64, scheduler string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	var res corev1.ResourceList
	if ips > 0 {
		res = corev1.ResourceList{names.UnderlayIPResource: *resource.NewQuantity(ips, resource.DecimalSI)}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				// The API's default grace: a delete (a scale-down, the
				// churn's) is graceful, and kwok ends the pod as the kubelet
				// does, terminal and then gone (e2e/tools/kwok/kubelet-delete.yaml),
				// which is when its IPs are free. A force delete's IPs are
				// held for 7 s, which the checker's free IPs, read from the
				// API, cannot see; holds have their own tests
				// (docs/failure-and-recovery.md "When is an IP free again").
				Spec: corev1.PodSpec{
					SchedulerName: scheduler,
					Containers: []corev1.Container{{Name: "app", Image: "registry.example/soak:1",
						Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}}}},
		},
	}
}

// replicas is the underlay pods setUp asks for, one IP each.
func (ch *churn) replicas() int64 {
	return ch.capacity / int64(len(ch.ipDeployments)) * int64(len(ch.ipDeployments))
}

// setUp creates the Deployments, sized to fill the cluster.
func (ch *churn) setUp(ctx context.Context) error {
	per := int32(ch.replicas() / int64(len(ch.ipDeployments)))
	ch.set, ch.target = map[string]int32{}, map[string]int32{}
	for _, name := range ch.ipDeployments {
		ch.set[name] = per
		if _, err := ch.c.AppsV1().Deployments(Namespace).Create(ctx, deployment(name, per, 1, ch.scheduler), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	_, err := ch.c.AppsV1().Deployments(Namespace).Create(ctx, deployment("plain", 20, 0, ""), metav1.CreateOptions{})
	return err
}

// step makes one change, chosen at random with weights.
func (ch *churn) step(ctx context.Context) {
	var err error
	switch r := ch.rng.IntN(100); {
	case r < 40:
		err = ch.scaleIP(ctx)
	case r < 60:
		err = ch.createBare(ctx)
	case r < 80:
		err = ch.deleteBare(ctx)
	default:
		err = ch.scalePlain(ctx)
	}
	ch.note(err)
}

func (ch *churn) note(err error) {
	if err != nil {
		ch.mu.Lock()
		ch.Errors++
		ch.mu.Unlock()
		ch.logf("churn: %v", err)
	}
}

// scaleIP sets one underlay Deployment so that the total asks for 90% to
// 115% of the capacity; when maxStep is set, it walks there maxStep
// replicas a scale.
func (ch *churn) scaleIP(ctx context.Context) error {
	name := ch.ipDeployments[ch.rng.IntN(len(ch.ipDeployments))]
	share := float64(ch.capacity) / float64(len(ch.ipDeployments))
	n := int32(share * (0.9 + 0.25*ch.rng.Float64()))
	ch.mu.Lock()
	if cur, ok := ch.set[name]; ok && ch.maxStep > 0 {
		// Paced: walk to a target in the band, then pick the next one, so
		// that demand still sweeps across capacity (binding and freeing IPs)
		// rather than hovering above it.
		t, ok := ch.target[name]
		if !ok || t == cur {
			t = n
			ch.target[name] = t
		}
		n = cur + max(-ch.maxStep, min(ch.maxStep, t-cur))
	}
	ch.set[name] = n
	ch.mu.Unlock()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	_, err := ch.c.AppsV1().Deployments(Namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func (ch *churn) scalePlain(ctx context.Context) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, 10+ch.rng.IntN(30))
	_, err := ch.c.AppsV1().Deployments(Namespace).Patch(ctx, "plain", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// createBare makes a bare pod of two IPs.
func (ch *churn) createBare(ctx context.Context) error {
	ch.mu.Lock()
	ch.seq++
	name := fmt.Sprintf("bare-%d", ch.seq)
	ch.mu.Unlock()
	d := deployment(name, 1, 2, ch.scheduler)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{"app": "bare"}}, Spec: d.Spec.Template.Spec}
	if _, err := ch.c.CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return err
	}
	ch.mu.Lock()
	ch.bare = append(ch.bare, name)
	ch.mu.Unlock()
	return nil
}

func (ch *churn) deleteBare(ctx context.Context) error {
	ch.mu.Lock()
	if len(ch.bare) == 0 {
		ch.mu.Unlock()
		return nil
	}
	i := ch.rng.IntN(len(ch.bare))
	name := ch.bare[i]
	ch.bare = append(ch.bare[:i], ch.bare[i+1:]...)
	ch.mu.Unlock()
	return ch.c.CoreV1().Pods(Namespace).Delete(ctx, name, metav1.DeleteOptions{})
}

// capacityValues are what the churn writes into a node's capacity
// annotation; "" removes it (the default applies), "many" is invalid.
var capacityValues = []string{"0", "1", "2", "3", "5", "many", ""}

// changeCapacity sets a random node's annotation to one of capacityValues.
func (ch *churn) changeCapacity(ctx context.Context) {
	node := ch.nodes[ch.rng.IntN(len(ch.nodes))]
	v := capacityValues[ch.rng.IntN(len(capacityValues))]
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, names.UnderlayIPCapacityAnnotation, v)
	if v == "" {
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, names.UnderlayIPCapacityAnnotation)
	}
	_, err := ch.c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	ch.note(err)
}

// recreateNode deletes a random node and adds it back a few seconds
// later, as a replaced machine would come back under its name.
func (ch *churn) recreateNode(ctx context.Context) {
	name := ch.nodes[ch.rng.IntN(len(ch.nodes))]
	n, err := ch.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		ch.note(err)
		return
	}
	if err := ch.c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		ch.note(err)
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(3 * time.Second):
	}
	// As a kubelet registers a Node: its labels and its own resources;
	// capscale's annotations (the capacity override, the publisher's
	// marker) and the published resource do not survive the re-creation.
	annotations := map[string]string{}
	for k, v := range n.Annotations {
		if !strings.HasPrefix(k, "capscale.io/") {
			annotations[k] = v
		}
	}
	capacity, allocatable := n.Status.Capacity.DeepCopy(), n.Status.Allocatable.DeepCopy()
	delete(capacity, names.UnderlayIPResource)
	delete(allocatable, names.UnderlayIPResource)
	fresh := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, Annotations: annotations},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: allocatable},
	}
	_, err = ch.c.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{})
	ch.note(err)
}

// run makes rate changes a second, a capacity change every capEvery and a
// node replacement every nodeEvery, until ctx ends.
func (ch *churn) run(ctx context.Context, rate float64, capEvery, nodeEvery time.Duration) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	capT, nodeT := time.NewTicker(capEvery), time.NewTicker(nodeEvery)
	defer capT.Stop()
	defer nodeT.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			ch.step(ctx)
		case <-capT.C:
			ch.changeCapacity(ctx)
		case <-nodeT.C:
			go ch.recreateNode(ctx)
		}
	}
}
